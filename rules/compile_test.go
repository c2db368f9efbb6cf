package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCompileErrors(t *testing.T) {
	type compileFn func(string) error
	cond := func(s string) error { _, err := CompileCondition(s); return err }
	outc := func(s string) error { _, err := CompileOutcome(s); return err }
	val := func(s string) error { _, err := CompileValue(s); return err }

	tests := []struct {
		name    string
		compile compileFn
		src     string
		line    int
		col     int
		msg     string
	}{
		{"unknown name", cond, "payload.amount > 10000 && paylod.x", 1, 27, `unknown name "paylod"`},
		{"unknown name in value", val, "{'id': payload.id, 'k': kee}", 1, 25, `unknown name "kee"`},
		{"unknown name multi-line", cond, "headers['a'] == 'b' &&\n  attempt > 1 &&\n    nope", 3, 5, `unknown name "nope"`},
		{"unknown name after tab", cond, "attempt > 1 &&\n\tnope", 2, 2, `unknown name "nope"`},
		{"column counts characters", cond, "'héé' == raw && nope", 1, 17, `unknown name "nope"`},
		{"type error", val, `attempt + "x"`, 1, 9, "invalid operation: + (mismatched types int and string)"},
		{"type error second line", cond, "key == 'a' ||\n  attempt + 'x' > 1", 2, 11, "invalid operation: + (mismatched types int and string)"},
		{"condition not bool", cond, "attempt + 1", 1, 1, "expected bool, but got int"},
		{"condition is an outcome", cond, "retry", 1, 1, "expected bool, but got outcome"},
		{"outcome is int", outc, "1 + 2", 1, 1, "expected an outcome (ack, drop, retry or retry_after(d)), got int"},
		{"outcome is int after blanks", outc, "\n  1 + 2", 2, 3, "expected an outcome (ack, drop, retry or retry_after(d)), got int"},
		{"outcome is dynamic", outc, "payload.amount", 1, 1, "expected an outcome (ack, drop, retry or retry_after(d)), got a value of unknown type"},
		{"outcome is a string", outc, "'ack'", 1, 1, "expected an outcome (ack, drop, retry or retry_after(d)), got string"},
		{"outcome branch not an outcome", outc, "attempt < 3 ? retry : 5", 1, 23, "expected an outcome (ack, drop, retry or retry_after(d)), got int"},
		{"outcome branch is a duration", outc, "attempt < 3 ?\n  retry :\n  backoff('1s', '1m')", 3, 3, "expected an outcome (ack, drop, retry or retry_after(d)), got duration"},
		{"bad constant duration", outc, "retry_after('5x')", 1, 13, `retry_after: invalid duration "5x"`},
		{"negative constant duration", outc, "attempt > 2 ? drop : retry_after('-1s')", 1, 34, `retry_after: negative duration "-1s"`},
		{"bad backoff duration", outc, "retry_after(backoff('1s', 'soon'))", 1, 27, `backoff: invalid duration "soon"`},
		{"backoff arity", outc, "retry_after(backoff('1s'))", 1, 13, "backoff takes two arguments (base, max), got 1"},
		{"backoff hidden argument not writable", outc, "retry_after(backoff('1s', '1m', 3))", 1, 13, "backoff takes two arguments (base, max), got 3"},
		{"retry_after arity", outc, "retry_after()", 1, 1, "retry_after takes one argument (a duration), got 0"},
		{"retry_after type", outc, "retry_after(3)", 1, 13, "cannot use int as argument (type time.Duration) to call retry_after"},
		{"ack takes no arguments", outc, "ack(1)", 1, 5, "ack takes no arguments"},
		{"syntax error", cond, "(attempt >", 1, 10, "unexpected token EOF"},
		{"empty", cond, "  ", 1, 1, "empty expression"},
		{"let cannot shadow the env", outc, "let attempt = 'x'; retry", 1, 5, "cannot redeclare attempt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.compile(tt.src)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if e.Line != tt.line || e.Column != tt.col || e.Message != tt.msg {
				t.Errorf("got %d:%d %q, want %d:%d %q", e.Line, e.Column, e.Message, tt.line, tt.col, tt.msg)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	tests := []struct {
		kind string
		src  string
	}{
		{"when", "payload.amount > 10000"},
		{"when", "headers['gateway'] == 'down'"},
		{"when", "payload.flag"}, // dynamic: checked when it runs
		{"when", "attempt >= 3 && delivery_count > 1 || idle_ms > 1000"},
		{"when", "key startsWith 'orders' and id != '' and len(raw) < 100"},
		{"when", "ack == ack()"},
		{"outcome", "ack"},
		{"outcome", "drop()"},
		{"outcome", "retry"},
		{"outcome", "retry_after('5s')"},
		{"outcome", "retry_after(duration('1m'))"},
		{"outcome", "retry_after(backoff('1s', '5m'))"},
		{"outcome", "retry_after(backoff(duration('1s'), '5m'))"},
		{"outcome", "retry_after(payload.delay)"},
		{"outcome", "attempt < 3 ? retry : drop"},
		{"outcome", "attempt < 3 ? retry_after('1s') : attempt < 5 ? retry_after(backoff('1s', '1m')) : drop"},
		{"value", "{'id': payload.id, 'paid': true}"},
		{"value", "'flowrun'"},
		{"value", "payload"},
		{"value", "backoff('1s', '1m')"},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+tt.src, func(t *testing.T) {
			var err error
			switch tt.kind {
			case "when":
				_, err = CompileCondition(tt.src)
			case "outcome":
				_, err = CompileOutcome(tt.src)
			default:
				_, err = CompileValue(tt.src)
			}
			if err != nil {
				t.Fatalf("compile %q: %v", tt.src, err)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{Line: 2, Column: 5, Message: `unknown name "x"`}
	if got, want := e.Error(), `2:5: unknown name "x"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestUses(t *testing.T) {
	tests := []struct {
		src              string
		payload, rawUsed bool
	}{
		{"attempt > 1", false, false},
		{"payload.x == 1", true, false},
		{"raw == ''", false, true},
		{"$env.key == ''", true, true},
		{"retry_after(backoff('1s', '1m')) == retry", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			c, err := CompileCondition(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if c.usesPayload != tt.payload || c.usesRaw != tt.rawUsed {
				t.Errorf("uses payload=%v raw=%v, want %v %v", c.usesPayload, c.usesRaw, tt.payload, tt.rawUsed)
			}
		})
	}
}

func TestMaxNodes(t *testing.T) {
	src := strings.Repeat("attempt + ", MaxNodes) + "1"
	_, err := CompileValue(src)
	var e *Error
	if !errors.As(err, &e) || e.Line != 1 || !strings.Contains(e.Message, "exceeds maximum allowed nodes") {
		t.Fatalf("got %v, want a node-limit error", err)
	}
	if _, err := CompileValue(strings.Repeat("attempt + ", MaxNodes/4) + "1"); err != nil {
		t.Fatalf("a large but allowed expression: %v", err)
	}
}

func TestString(t *testing.T) {
	const src = "attempt < 3 ? retry : drop"
	o, err := CompileOutcome(src)
	if err != nil {
		t.Fatal(err)
	}
	if o.String() != src {
		t.Errorf("got %q, want %q", o.String(), src)
	}
}

// A value that is a literal (after folding) or one header read is given without the VM, and
// gives what the VM gives; anything else runs the VM.
func TestDirectValues(t *testing.T) {
	d := delivery(`{"id":7}`, map[string]string{"sent": "123", "x-y": "z"})
	for _, tc := range []struct {
		src    string
		direct bool
	}{
		{`'flowrun'`, true},
		{`"yes"`, true},
		{`42`, true},
		{`1.5`, true},
		{`true`, true},
		{`1 + 2`, true}, // folded
		{`headers['sent']`, true},
		{`headers.sent`, true},
		{`headers['x-y']`, true},
		{`headers['missing']`, true},
		{`headers?.sent`, false},
		{`headers['missing'] ?? 'none'`, false},
		{`payload.id`, false},
		{`raw`, false},
		{`key`, false},
		{`now().Add(duration('1h')).Unix()`, false},
		{`date('2026-01-02').UnixMicro()`, false},
		{`let h = headers; h.sent`, false},
	} {
		p, err := compile(tc.src, kindValue)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if (p.direct != nil) != tc.direct {
			t.Errorf("%s: direct %v, want %v", tc.src, p.direct != nil, tc.direct)
			continue
		}
		if p.direct == nil {
			continue
		}
		got, err := p.run(&state{d: d})
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		p.direct = nil
		want, err := p.run(&state{d: d})
		if err != nil {
			t.Fatalf("%s through the VM: %v", tc.src, err)
		}
		if got != want {
			t.Errorf("%s = %#v (%T) directly, %#v (%T) through the VM", tc.src, got, got, want, want)
		}
	}
}

// now() and a time method of now() as an emit value read the clock directly, with the VM's
// result type.
func TestDirectClockValues(t *testing.T) {
	d := delivery(`{}`, nil)
	for _, src := range []string{`now()`, `now().UnixMicro()`, `now().Unix()`, `now().Year()`, `now().UTC()`} {
		p, err := compile(src, kindValue)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if p.direct == nil {
			t.Errorf("%s: not direct", src)
			continue
		}
		got, _ := p.run(&state{d: d})
		p.direct = nil
		want, _ := p.run(&state{d: d})
		if reflect.TypeOf(got) != reflect.TypeOf(want) {
			t.Errorf("%s: %T directly, %T through the VM", src, got, want)
		}
		if us, ok := got.(int64); ok && src == `now().UnixMicro()` {
			if diff := want.(int64) - us; diff < 0 || diff > int64(time.Second/time.Microsecond) {
				t.Errorf("%s: %d directly, %d through the VM just after", src, us, want)
			}
		}
	}
}
