package rules

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

func mustCond(t testing.TB, src string) *Condition {
	t.Helper()
	c, err := CompileCondition(src)
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	return c
}

func mustOutcome(t testing.TB, src string) *OutcomeExpr {
	t.Helper()
	o, err := CompileOutcome(src)
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	return o
}

func mustValue(t testing.TB, src string) *Value {
	t.Helper()
	v, err := CompileValue(src)
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	return v
}

func delivery(payload string, headers map[string]string) *engine.Delivery {
	if headers == nil {
		headers = map[string]string{}
	}
	return &engine.Delivery{
		Message: engine.Message{Key: "orders", ID: "1-0", Headers: headers, Payload: []byte(payload)},
		Attempt: 1,
	}
}

func TestOutcomeForms(t *testing.T) {
	tests := []struct {
		src     string
		payload string
		attempt int
		want    engine.Outcome
	}{
		{"ack", `{}`, 1, engine.Ack()},
		{"drop", `{}`, 1, engine.Drop()},
		{"retry", `{}`, 1, engine.Retry()},
		{"ack()", `{}`, 1, engine.Ack()},
		{"drop()", `{}`, 1, engine.Drop()},
		{"retry()", `{}`, 1, engine.Retry()},
		{"retry_after('5s')", `{}`, 1, engine.RetryAfter(5 * time.Second)},
		{"retry_after('1m30s')", `{}`, 1, engine.RetryAfter(90 * time.Second)},
		{"retry_after(duration('2m'))", `{}`, 1, engine.RetryAfter(2 * time.Minute)},
		{"retry_after(payload.delay)", `{"delay":"7s"}`, 1, engine.RetryAfter(7 * time.Second)},
		{"retry_after(payload.delay + 's')", `{"delay":"3"}`, 1, engine.RetryAfter(3 * time.Second)},
		{"attempt < 3 ? retry : drop", `{}`, 2, engine.Retry()},
		{"attempt < 3 ? retry : drop", `{}`, 3, engine.Drop()},
		{"attempt < 3 ? retry() : drop()", `{}`, 3, engine.Drop()},
		{"payload.fatal ? drop : retry_after('1s')", `{"fatal":false}`, 1, engine.RetryAfter(time.Second)},
		{"retry_after(backoff('1s', '1s'))", `{}`, 1, engine.RetryAfter(0)}, // checked separately below
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s attempt %d", tt.src, tt.attempt), func(t *testing.T) {
			rs := &RuleSet{Rules: []Rule{{Name: "r", Outcome: mustOutcome(t, tt.src)}}}
			d := delivery(tt.payload, nil)
			d.Attempt = tt.attempt
			res, name := rs.Evaluate(d)
			if res.Err != nil {
				t.Fatalf("err: %v", res.Err)
			}
			if name != "r" {
				t.Errorf("rule %q, want r", name)
			}
			if strings.Contains(tt.src, "backoff") {
				if res.Outcome.Kind != engine.KindRetryAfter || res.Outcome.Delay < 0 || res.Outcome.Delay > time.Second {
					t.Errorf("got %v, want retry_after within [0,1s]", res.Outcome)
				}
				return
			}
			if res.Outcome != tt.want {
				t.Errorf("got %v, want %v", res.Outcome, tt.want)
			}
		})
	}
}

func TestRetryAfterBackoff(t *testing.T) {
	o := mustOutcome(t, "retry_after(backoff('1s', '5m'))")
	rs := &RuleSet{Rules: []Rule{{Name: "r", Outcome: o}}}
	tests := []struct {
		attempt int
		cap     time.Duration
	}{
		{0, time.Second}, // below 1 counts as 1
		{1, time.Second},
		{2, 2 * time.Second},
		{4, 8 * time.Second},
		{9, 256 * time.Second},
		{10, 5 * time.Minute},
		{1000, 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.cap.String(), func(t *testing.T) {
			var maxSeen time.Duration
			for i := 0; i < 2000; i++ {
				d := delivery(`{}`, nil)
				d.Attempt = tt.attempt
				res, _ := rs.Evaluate(d)
				if res.Err != nil || res.Outcome.Kind != engine.KindRetryAfter {
					t.Fatalf("got %v, %v", res.Outcome, res.Err)
				}
				if res.Outcome.Delay < 0 || res.Outcome.Delay > tt.cap {
					t.Fatalf("delay %v outside [0, %v]", res.Outcome.Delay, tt.cap)
				}
				maxSeen = max(maxSeen, res.Outcome.Delay)
			}
			// 2000 uniform draws all below 90% of the cap: probability 0.9^2000.
			if maxSeen < tt.cap*9/10 {
				t.Errorf("largest delay %v never came near the cap %v: not exponential on attempt", maxSeen, tt.cap)
			}
		})
	}
}

func TestEnvFields(t *testing.T) {
	d := &engine.Delivery{
		Message: engine.Message{
			Key:     "orders",
			ID:      "1700000000000-3",
			Headers: map[string]string{"gateway": "down", "x-retry-count": "2"},
			Payload: []byte(`{"id":7,"amount":12000.5,"tags":["a","b"],"customer":{"name":"Ann"}}`),
		},
		Attempt:       3,
		DeliveryCount: 4,
		IdleMS:        1500,
	}
	notJSON := delivery("hello, world", nil)
	empty := delivery("", map[string]string{"id": "7"})
	jsonString := delivery(`"quoted"`, nil)

	tests := []struct {
		when string
		d    *engine.Delivery
	}{
		{"headers['gateway'] == 'down'", d},
		{"headers.gateway == 'down'", d},
		{"headers['missing'] == ''", d},
		{"'gateway' in headers && !('nope' in headers)", d},
		{"len(headers) == 2", d},
		{"attempt == 3", d},
		{"attempt + 1 == 4", d},
		{"delivery_count == 4", d},
		{"idle_ms == 1500", d},
		{"key == 'orders'", d},
		{"id == '1700000000000-3'", d},
		{`raw == '{"id":7,"amount":12000.5,"tags":["a","b"],"customer":{"name":"Ann"}}'`, d},
		{"payload.amount > 10000", d},
		{"payload.id == 7", d},
		{"payload.customer.name == 'Ann'", d},
		{"payload.tags[1] == 'b' && len(payload.tags) == 2", d},
		{"payload.missing == nil", d},
		{"payload == 'hello, world'", notJSON},
		{"raw == 'hello, world' && payload == raw", notJSON},
		{"payload == '' && raw == '' && headers.id == '7'", empty},
		{"payload == 'quoted' && raw == '\"quoted\"'", jsonString},
		{"attempt == 1 && delivery_count == 0 && idle_ms == 0 && id == '1-0'", notJSON},
	}
	for _, tt := range tests {
		t.Run(tt.when, func(t *testing.T) {
			rs := &RuleSet{
				Rules:     []Rule{{Name: "yes", When: mustCond(t, tt.when), Outcome: mustOutcome(t, "drop")}},
				Otherwise: mustOutcome(t, "retry"),
			}
			res, name := rs.Evaluate(tt.d)
			if res.Err != nil {
				t.Fatalf("err: %v", res.Err)
			}
			if name != "yes" || res.Outcome != engine.Drop() {
				t.Errorf("condition did not hold: rule %q, outcome %v", name, res.Outcome)
			}
		})
	}
}

func TestLazyPayload(t *testing.T) {
	tests := []struct {
		name        string
		srcs        []string
		wantPayload bool
		wantRaw     bool
	}{
		{"headers only", []string{"headers['a'] == 'b'"}, false, false},
		{"payload", []string{"attempt > 0", "payload.x == nil"}, true, false},
		{"raw", []string{"raw == ''"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := state{d: delivery(`{"x":1}`, nil)}
			for _, src := range tt.srcs {
				if _, err := mustCond(t, src).eval(&s); err != nil {
					t.Fatal(err)
				}
			}
			if s.havePayload != tt.wantPayload || s.haveRaw != tt.wantRaw {
				t.Errorf("decoded payload=%v raw=%v, want %v %v", s.havePayload, s.haveRaw, tt.wantPayload, tt.wantRaw)
			}
		})
	}
}

func TestEmits(t *testing.T) {
	target := engine.Target{Kind: "stream", Redis: "main"}
	payload := `{"id":7,"amount":20000,"rate":1.5,"name":"<Ann & Bob>"}`
	tests := []struct {
		name        string
		spec        EmitSpec
		wantPayload string
		wantHeaders map[string]string
	}{
		{
			name:        "payload unchanged, no headers",
			spec:        EmitSpec{Target: target, Key: "done"},
			wantPayload: payload,
			wantHeaders: map[string]string{},
		},
		{
			name:        "map literal as JSON",
			spec:        EmitSpec{Target: target, Key: "done", Payload: mustValue(t, "{'id': payload.id, 'paid': true}")},
			wantPayload: `{"id":7,"paid":true}`,
			wantHeaders: map[string]string{},
		},
		{
			name:        "string as its bytes",
			spec:        EmitSpec{Target: target, Key: "done", Payload: mustValue(t, "'paid ' + string(payload.id)")},
			wantPayload: `paid 7`,
			wantHeaders: map[string]string{},
		},
		{
			name:        "number and array as JSON, no HTML escaping",
			spec:        EmitSpec{Target: target, Key: "done", Payload: mustValue(t, "[payload.amount, payload.rate, payload.name, nil]")},
			wantPayload: `[20000,1.5,"<Ann & Bob>",null]`,
			wantHeaders: map[string]string{},
		},
		{
			name:        "raw passes through",
			spec:        EmitSpec{Target: target, Key: "done", Payload: mustValue(t, "raw")},
			wantPayload: payload,
			wantHeaders: map[string]string{},
		},
		{
			name: "headers as strings",
			spec: EmitSpec{Target: target, Key: "done", Headers: map[string]*Value{
				"source":   mustValue(t, "'flowrun'"),
				"amount":   mustValue(t, "payload.amount"),
				"big":      mustValue(t, "payload.amount * 1e12"),
				"rate":     mustValue(t, "payload.rate"),
				"attempt":  mustValue(t, "attempt"),
				"paid":     mustValue(t, "payload.amount > 100"),
				"missing":  mustValue(t, "payload.missing"),
				"delay":    mustValue(t, "duration('1m30s')"),
				"outcome":  mustValue(t, "retry_after('5s')"),
				"obj":      mustValue(t, "{'b': 1, 'a': [true]}"),
				"original": mustValue(t, "headers['trace']"),
			}, HeaderOrder: []string{"source", "amount", "big", "rate", "attempt", "paid", "missing", "delay", "nope"}},
			wantPayload: payload,
			wantHeaders: map[string]string{
				"source": "flowrun", "amount": "20000", "big": "20000000000000000", "rate": "1.5",
				"attempt": "2", "paid": "true", "delay": "1m30s", // missing: nil, not written (SPEC §7)
				"outcome": "retry_after(5s)", "obj": `{"a":[true],"b":1}`, "original": "t-1",
			},
		},
		{
			name: "nil headers not written",
			spec: EmitSpec{Target: target, Key: "done", Headers: map[string]*Value{
				"none":    mustValue(t, "nil"),
				"absent":  mustValue(t, "headers['absent'] ?? nil"),
				"present": mustValue(t, "headers['trace'] ?? nil"),
				"maybe":   mustValue(t, "attempt > 5 ? 'late' : nil"),
			}, HeaderOrder: []string{"none", "absent", "present", "maybe"}},
			wantPayload: payload,
			wantHeaders: map[string]string{"present": "t-1"},
		},
		{
			name:        "forward_headers: the delivery's but x- headers",
			spec:        EmitSpec{Target: target, Key: "done", ForwardHeaders: true},
			wantPayload: payload,
			wantHeaders: map[string]string{"trace": "t-1", "tenant": "acme"},
		},
		{
			name: "forward_headers: headers override, nil removes",
			spec: EmitSpec{Target: target, Key: "done", ForwardHeaders: true, Headers: map[string]*Value{
				"tenant": mustValue(t, "'other'"),
				"trace":  mustValue(t, "nil"),
				"stage":  mustValue(t, "'billed'"),
			}, HeaderOrder: []string{"tenant", "trace", "stage"}},
			wantPayload: payload,
			wantHeaders: map[string]string{"tenant": "other", "stage": "billed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := &RuleSet{Rules: []Rule{{Name: "ok", Emits: []EmitSpec{tt.spec}}}}
			d := delivery(payload, map[string]string{"trace": "t-1"})
			if tt.spec.ForwardHeaders {
				d.Headers["tenant"], d.Headers["x-retry-count"] = "acme", "1"
			}
			d.Attempt = 2
			res, name := rs.Evaluate(d)
			if res.Err != nil {
				t.Fatalf("err: %v", res.Err)
			}
			if name != "ok" || res.Outcome != engine.Ack() {
				t.Errorf("rule %q outcome %v, want ok ack", name, res.Outcome)
			}
			if len(res.Emits) != 1 {
				t.Fatalf("%d emits, want 1", len(res.Emits))
			}
			e := res.Emits[0]
			if e.Target != target {
				t.Errorf("target %+v, want %+v", e.Target, target)
			}
			m := e.Message
			if m.Key != "done" || m.ID != "" {
				t.Errorf("key %q id %q, want done and empty", m.Key, m.ID)
			}
			if string(m.Payload) != tt.wantPayload {
				t.Errorf("payload %s, want %s", m.Payload, tt.wantPayload)
			}
			if m.Headers == nil || !reflect.DeepEqual(m.Headers, tt.wantHeaders) {
				t.Errorf("headers %#v, want %#v", m.Headers, tt.wantHeaders)
			}
		})
	}
}

func TestMultipleEmitsInOrder(t *testing.T) {
	rs := &RuleSet{Rules: []Rule{{Name: "fan-out", Outcome: mustOutcome(t, "drop"), Emits: []EmitSpec{
		{Target: engine.Target{Kind: "list", Redis: "main"}, Key: "a", Payload: mustValue(t, "'1'")},
		{Target: engine.Target{Kind: "record"}, Key: "b", Payload: mustValue(t, "'2'"),
			Headers: map[string]*Value{"h": mustValue(t, "key")}},
	}}}}
	res, _ := rs.Evaluate(delivery("x", nil))
	if res.Err != nil || res.Outcome != engine.Drop() || len(res.Emits) != 2 {
		t.Fatalf("got %+v", res)
	}
	got := []string{
		res.Emits[0].Target.Kind + " " + res.Emits[0].Message.Key + " " + string(res.Emits[0].Message.Payload),
		res.Emits[1].Target.Kind + " " + res.Emits[1].Message.Key + " " + string(res.Emits[1].Message.Payload) + " " + res.Emits[1].Message.Headers["h"],
	}
	want := []string{"list a 1", "record b 2 orders"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// specRules is the rule set of SPEC §2's example pipeline.
func specRules(t testing.TB, otherwise string) *RuleSet {
	rs := &RuleSet{Rules: []Rule{
		{Name: "too-large", When: mustCond(t, "payload.amount > 10000"), Outcome: mustOutcome(t, "drop")},
		{Name: "gateway-down", When: mustCond(t, "headers['gateway'] == 'down'"), Outcome: mustOutcome(t, "retry_after('5s')")},
		{Name: "ok", Outcome: mustOutcome(t, "ack"), Emits: []EmitSpec{{
			Target:  engine.Target{Kind: "stream", Redis: "main"},
			Key:     "payouts.done",
			Payload: mustValue(t, "{'id': payload.id, 'paid': true}"),
			Headers: map[string]*Value{"source": mustValue(t, "'flowrun'")},
		}}},
	}}
	if otherwise != "" {
		rs.Otherwise = mustOutcome(t, otherwise)
		rs.Rules = rs.Rules[:2]
	}
	return rs
}

func TestFirstMatchAndOtherwise(t *testing.T) {
	tests := []struct {
		name      string
		otherwise string
		payload   string
		headers   map[string]string
		attempt   int
		wantRule  string
		want      engine.Outcome
		wantEmits int
	}{
		{"first rule wins over later matches", "", `{"id":1,"amount":20000}`, map[string]string{"gateway": "down"}, 1, "too-large", engine.Drop(), 0},
		{"second rule", "", `{"id":1,"amount":5}`, map[string]string{"gateway": "down"}, 1, "gateway-down", engine.RetryAfter(5 * time.Second), 0},
		{"catch-all with emit", "", `{"id":1,"amount":5}`, nil, 1, "ok", engine.Ack(), 1},
		{"no match: ack", "-", `{"id":1,"amount":5}`, nil, 1, "", engine.Ack(), 0},
		{"no match: otherwise", "attempt < 3 ? retry : drop", `{"id":1,"amount":5}`, nil, 2, "", engine.Retry(), 0},
		{"no match: otherwise on last attempt", "attempt < 3 ? retry : drop", `{"id":1,"amount":5}`, nil, 3, "", engine.Drop(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rs *RuleSet
			switch tt.otherwise {
			case "":
				rs = specRules(t, "")
			case "-":
				rs = specRules(t, "ack")
				rs.Otherwise = nil
			default:
				rs = specRules(t, tt.otherwise)
			}
			d := delivery(tt.payload, tt.headers)
			d.Attempt = tt.attempt
			res, name := rs.Evaluate(d)
			if res.Err != nil {
				t.Fatalf("err: %v", res.Err)
			}
			if name != tt.wantRule || res.Outcome != tt.want || len(res.Emits) != tt.wantEmits {
				t.Errorf("got rule %q %v %d emits, want %q %v %d", name, res.Outcome, len(res.Emits), tt.wantRule, tt.want, tt.wantEmits)
			}
			if h := rs.Handle(context.Background(), d); h.Outcome != res.Outcome || h.Err != nil {
				t.Errorf("Handle: %+v, Evaluate: %+v", h, res)
			}
		})
	}
}

func TestRuntimeErrorIsRetry(t *testing.T) {
	tests := []struct {
		name     string
		rs       func(t *testing.T) *RuleSet
		payload  string
		wantRule string
		wantErr  []string
	}{
		{
			name: "bad duration at run time",
			rs: func(t *testing.T) *RuleSet {
				return &RuleSet{Rules: []Rule{{Name: "later", Outcome: mustOutcome(t, "retry_after(payload.delay)")}}}
			},
			payload:  `{"delay":"5x"}`,
			wantRule: "later",
			wantErr:  []string{`rule "later": outcome: `, `retry_after: invalid duration "5x"`, "(at 1:1)"},
		},
		{
			name: "when fails",
			rs: func(t *testing.T) *RuleSet {
				return &RuleSet{Rules: []Rule{
					{Name: "a", When: mustCond(t, "attempt > 5"), Outcome: mustOutcome(t, "drop")},
					{Name: "b", When: mustCond(t, "key == 'orders' &&\n  payload.amount > 10"), Outcome: mustOutcome(t, "drop")},
				}}
			},
			payload:  `{"amount":"lots"}`,
			wantRule: "b",
			wantErr:  []string{`rule "b": payload.amount is a string ("lots"), compared with a number (at 2:3)`},
		},
		{
			name: "when not bool at run time",
			rs: func(t *testing.T) *RuleSet {
				return &RuleSet{Rules: []Rule{{Name: "flag", When: mustCond(t, "payload.flag"), Outcome: mustOutcome(t, "drop")}}}
			},
			payload:  `{"flag":"yes"}`,
			wantRule: "flag",
			wantErr:  []string{`rule "flag": when: invalid operation: bool(string) (at 1:1)`},
		},
		{
			name: "emit payload fails",
			rs: func(t *testing.T) *RuleSet {
				return &RuleSet{Rules: []Rule{{Name: "e", Emits: []EmitSpec{{Target: engine.Target{Kind: "stream"}, Key: "out",
					Payload: mustValue(t, "payload.a.b.c")}}}}}
			},
			payload:  `{"a":1}`,
			wantRule: "e",
			wantErr:  []string{`rule "e": emit 1 (stream "out"): payload: `},
		},
		{
			name: "emit header fails",
			rs: func(t *testing.T) *RuleSet {
				return &RuleSet{Rules: []Rule{{Name: "h", Emits: []EmitSpec{{Target: engine.Target{Kind: "list"}, Key: "out",
					Headers: map[string]*Value{"n": mustValue(t, "int(payload.n)")}}}}}}
			},
			payload:  `{"n":"seven"}`,
			wantRule: "h",
			wantErr:  []string{`rule "h": emit 1 (list "out"): header "n": `},
		},
		{
			name: "otherwise fails",
			rs: func(t *testing.T) *RuleSet {
				return &RuleSet{Otherwise: mustOutcome(t, "retry_after(backoff(payload.base, '1m'))")}
			},
			payload:  `{"base":"x"}`,
			wantRule: "",
			wantErr:  []string{`otherwise: `, `backoff: base: invalid duration "x"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := tt.rs(t)
			res, name := rs.Evaluate(delivery(tt.payload, nil))
			if res.Err == nil {
				t.Fatalf("no error; outcome %v", res.Outcome)
			}
			if res.Outcome != engine.Retry() || res.Emits != nil {
				t.Errorf("outcome %v with %d emits, want retry and none", res.Outcome, len(res.Emits))
			}
			if name != tt.wantRule {
				t.Errorf("rule %q, want %q", name, tt.wantRule)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(res.Err.Error(), w) {
					t.Errorf("error %q does not contain %q", res.Err, w)
				}
			}
			if strings.Contains(res.Err.Error(), "\n") {
				t.Errorf("error %q spans lines", res.Err)
			}
			if h := rs.Handle(context.Background(), delivery(tt.payload, nil)); h.Err == nil || h.Outcome != engine.Retry() {
				t.Errorf("Handle: %+v", h)
			}
		})
	}
}

func TestEvalErrorPosition(t *testing.T) {
	rs := &RuleSet{Rules: []Rule{{Name: "r", Outcome: mustOutcome(t, "attempt > 1 ?\n  retry :\n  retry_after(payload.d)")}}}
	res, _ := rs.Evaluate(delivery(`{"d":"soon"}`, nil))
	var ee *EvalError
	if !errors.As(res.Err, &ee) {
		t.Fatalf("err %v is not an *EvalError", res.Err)
	}
	if ee.Line != 3 || ee.Column != 3 {
		t.Errorf("at %d:%d, want 3:3", ee.Line, ee.Column)
	}
}

func TestMissingFields(t *testing.T) {
	tests := []struct {
		when    string
		payload string
		want    string // "match", "no match" or "error"
	}{
		{"payload.amount > 10000", `{"id":1}`, "error"}, // nil > int: expr refuses, so the delivery retries
		{"(payload.amount ?? 0) > 10000", `{"id":1}`, "no match"},
		{"payload?.amount == nil", `not json`, "error"}, // a string has no fields
		{"payload.amount > 10000", `not json`, "error"},
		{"type(payload) == 'map' && payload.amount > 10000", `not json`, "no match"},
	}
	for _, tt := range tests {
		t.Run(tt.when+" "+tt.payload, func(t *testing.T) {
			rs := &RuleSet{Rules: []Rule{{Name: "r", When: mustCond(t, tt.when), Outcome: mustOutcome(t, "drop")}}}
			res, name := rs.Evaluate(delivery(tt.payload, nil))
			got := "no match"
			switch {
			case res.Err != nil:
				got = "error"
			case name == "r":
				got = "match"
			}
			if got != tt.want {
				t.Errorf("got %s (%v), want %s", got, res.Err, tt.want)
			}
		})
	}
}

func TestConcurrentEvaluate(t *testing.T) {
	rs := specRules(t, "")
	payloads := []struct {
		payload, gateway string
		want             engine.Kind
	}{
		{`{"id":1,"amount":20000}`, "up", engine.KindDrop},
		{`{"id":2,"amount":5}`, "down", engine.KindRetryAfter},
		{`{"id":3,"amount":5}`, "up", engine.KindAck},
	}
	done := make(chan error)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; i < 300; i++ {
				p := payloads[(g+i)%len(payloads)]
				res, _ := rs.Evaluate(delivery(p.payload, map[string]string{"gateway": p.gateway}))
				if res.Err != nil || res.Outcome.Kind != p.want {
					done <- fmt.Errorf("payload %s: got %+v, want %v", p.payload, res, p.want)
					return
				}
				if p.want == engine.KindAck && string(res.Emits[0].Message.Payload) != fmt.Sprintf(`{"id":%d,"paid":true}`, (g+i)%3+1) {
					done <- fmt.Errorf("emit %s", res.Emits[0].Message.Payload)
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
