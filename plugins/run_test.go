package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
)

// testRun is the run of a visit of the step "charge".
func testRun() *RunInfo {
	return &RunInfo{ID: "o-7", Workflow: "order", Step: "charge", Visit: 2,
		StartedAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		Input:     map[string]any{"sku": "A-1", "qty": 2.0},
		Steps:     map[string]any{"reserve": map[string]any{"hold": "h-1"}}}
}

func stepMessage(payload string) TestMessage {
	m := message(payload, nil, 1)
	m.Run = testRun()
	return m
}

func TestMessageRun(t *testing.T) {
	if _, ok := (Message{}).Run(); ok {
		t.Error("the zero Message has a run")
	}
	d := &engine.Delivery{Run: &engine.Run{ID: "o-7", Workflow: "order", Step: "charge", Visit: 2,
		Input: map[string]any{"sku": "A-1", "tags": []any{"a"}},
		Steps: map[string]any{"reserve": json.RawMessage(`{"hold":"h-1"}`), "check": "ok"}}}
	m := Message{d: d}
	info, ok := m.Run()
	want := RunInfo{ID: "o-7", Workflow: "order", Step: "charge", Visit: 2,
		Input: map[string]any{"sku": "A-1", "tags": []any{"a"}},
		Steps: map[string]any{"reserve": map[string]any{"hold": "h-1"}, "check": "ok"}}
	if !ok || !reflect.DeepEqual(info, want) {
		t.Fatalf("Run() = %+v, %v; want %+v", info, ok, want)
	}
	// A copy: what the handler changes is not the run's.
	info.Input.(map[string]any)["sku"] = "changed"
	info.Input.(map[string]any)["tags"].([]any)[0] = "changed"
	info.Steps["check"] = "changed"
	again, _ := m.Run()
	if !reflect.DeepEqual(again, want) {
		t.Errorf("changing Run()'s result changed the run: %+v", again)
	}
	if _, ok := (Message{d: &engine.Delivery{}}).Run(); ok {
		t.Error("a pipeline's message has a run")
	}
}

// outputHandler sets out as the output, then returns o and err.
func outputHandler(out any, o Outcome, err error) Handler {
	return HandlerFunc(func(_ context.Context, m Message, emit *Emitter) (Outcome, error) {
		emit.Output(out)
		return o, err
	})
}

func TestEmitterOutput(t *testing.T) {
	type receipt struct {
		ID   string `json:"id"`
		Note string `json:"note"`
	}
	tests := []struct {
		name string
		h    Handler
		m    TestMessage
		want string // "" no output
		err  string
	}{
		{"struct", outputHandler(receipt{"r-1", "<ok> & done"}, Ack(), nil), stepMessage(""), `{"id":"r-1","note":"<ok> & done"}`, ""},
		{"raw JSON", outputHandler(json.RawMessage(" [1, 2] "), Ack(), nil), stepMessage(""), `[1,2]`, ""},
		{"nil is null", outputHandler(nil, Ack(), nil), stepMessage(""), `null`, ""},
		{"string", outputHandler("done", Ack(), nil), stepMessage(""), `"done"`, ""},
		{"outside a workflow: nothing", outputHandler("done", Ack(), nil), message("", nil, 1), "", ""},
		{"an error discards it", outputHandler("done", Ack(), errors.New("boom")), stepMessage(""), "", "boom"},
		{"not encodable", outputHandler(make(chan int), Ack(), nil), stepMessage(""), "", "output: json: unsupported type: chan int"},
		{"bad raw JSON", outputHandler(json.RawMessage("{"), Ack(), nil), stepMessage(""), "", "output: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := call(tt.h, tt.m)
			if tt.err != "" {
				if res.Err == nil || !strings.Contains(res.Err.Error(), tt.err) || res.Outcome != Retry() {
					t.Errorf("got %v %v, want retry with %q", res.Outcome, res.Err, tt.err)
				}
			} else if res.Err != nil || res.Outcome != Ack() {
				t.Errorf("got %v %v", res.Outcome, res.Err)
			}
			if string(res.Output) != tt.want {
				t.Errorf("output %q, want %q", res.Output, tt.want)
			}
		})
	}
}

func TestEmitterOutputLastWinsAndLateIsDropped(t *testing.T) {
	var late *Emitter
	h := HandlerFunc(func(_ context.Context, m Message, emit *Emitter) (Outcome, error) {
		emit.Output(1)
		emit.Output(map[string]int{"n": 2})
		late = emit
		return Ack(), nil
	})
	d := &engine.Delivery{Run: &engine.Run{ID: "r"}}
	if o, _, err := invoke(context.Background(), h, Message{d: d}, zerolog.Nop()); o != Ack() || err != nil {
		t.Fatalf("got %v %v", o, err)
	}
	late.Output(3) // after Handle returned: dropped
	if got, _ := d.Run.Output.(json.RawMessage); !d.Run.HasOutput || string(got) != `{"n":2}` {
		t.Errorf("run output %q (%v), want {\"n\":2}", got, d.Run.HasOutput)
	}
}

// TestCallIdempotencyKey: Call gives a step's message the key the step source would.
func TestCallIdempotencyKey(t *testing.T) {
	var got []string
	h := HandlerFunc(func(_ context.Context, m Message, _ *Emitter) (Outcome, error) {
		got = append(got, m.Header(engine.HeaderIdempotencyKey))
		return Ack(), nil
	})
	call(h, stepMessage(""))
	mine := stepMessage("")
	mine.Headers = map[string]string{engine.HeaderIdempotencyKey: "mine"}
	call(h, mine)
	call(h, message("", nil, 1))
	if want := []string{"order/o-7/charge/2", "mine", ""}; !reflect.DeepEqual(got, want) {
		t.Errorf("keys %q, want %q", got, want)
	}
}

// stepServer answers every request with status and body, noting each request's
// Idempotency-Key header.
func stepServer(t *testing.T, status int, body string) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), keys...)
	}
}

func TestHTTPStepOutput(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   Outcome
		output string
	}{
		{"JSON body", 200, "{\"id\": \"ch_1\",\n \"status\": \"paid\"}\n", Ack(), `{"id":"ch_1","status":"paid"}`},
		{"text body", 201, "charged <ok>", Ack(), `"charged <ok>"`},
		{"empty body", 204, "", Ack(), `""`},
		{"too large", 200, strings.Repeat("x", maxOutput+1), DeadLetter("http 200: the response body exceeds 1048576 bytes, the most a step's output may be"), ""},
		{"a failure records nothing", 400, `{"error":"no"}`, DeadLetter(`http 400 Bad Request: {"error":"no"}`), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, keys := stepServer(t, tt.status, tt.body)
			h := build(t, "h.hcl", httpBlock(srv.URL, ""))
			res := call(h, stepMessage(`{"sku":"A-1"}`))
			if res.Err != nil || res.Outcome != tt.want || string(res.Output) != tt.output {
				t.Errorf("got %v %v output %q; want %v output %q", res.Outcome, res.Err, res.Output, tt.want, tt.output)
			}
			if got := keys(); len(got) != 1 || got[0] != "order/o-7/charge/2" {
				t.Errorf("Idempotency-Key %q, want order/o-7/charge/2", got)
			}
		})
	}
}

func TestHTTPIdempotencyKeyOutsideAWorkflow(t *testing.T) {
	srv, keys := stepServer(t, 200, `{"ok":true}`)
	h := build(t, "h.hcl", httpBlock(srv.URL, ""))
	plain := call(h, message(`{}`, nil, 1))
	keyed := call(h, message(`{}`, map[string]string{engine.HeaderIdempotencyKey: "k-1"}, 1))
	if plain.Output != nil || keyed.Output != nil || plain.Outcome != Ack() || keyed.Outcome != Ack() {
		t.Errorf("outside a workflow: %+v %+v", plain, keyed)
	}
	// Without a run the message's header is still sent under the standard name; a block's
	// headers win, as for every header.
	if got := keys(); !reflect.DeepEqual(got, []string{"", "k-1"}) {
		t.Errorf("Idempotency-Key %q", got)
	}
	h = build(t, "h.hcl", httpBlock(srv.URL, "  headers = { Idempotency-Key = \"fixed\" }\n"))
	call(h, stepMessage(`{}`))
	if got := keys(); got[len(got)-1] != "fixed" {
		t.Errorf("Idempotency-Key %q, want the block's", got)
	}
}

func TestExecStepOutput(t *testing.T) {
	tests := []struct {
		name, script, extra string
		want                Outcome
		output              string
		emits               []string
	}{
		{"JSON", `echo '{"id": "r-1", "n": 2}'`, "", Ack(), `{"id":"r-1","n":2}`, nil},
		{"text without trailing newlines", `printf 'reserved\n\n'`, "", Ack(), `"reserved"`, nil},
		{"nothing", `true`, "", Ack(), `""`, nil},
		{"emit_stdout too", `echo a; echo b`, "  emit_stdout = \"k\"\n", Ack(), `"a\nb"`, []string{"a", "b"}},
		{"reads the key and payload", `read p; echo "$FLOWRUN_HEADER_X_IDEMPOTENCY_KEY $p"`, "", Ack(), `"order/o-7/charge/2 {\"sku\":\"A-1\"}"`, nil},
		{"a failure records nothing", `echo partial; exit 3`, "", DeadLetter("exec: exit status 3"), "", nil},
		{"too large", `head -c 1048577 /dev/zero | tr '\0' x`, "", DeadLetter("exec: stdout exceeds 1048576 bytes, the most a step's output may be"), "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := build(t, "h.hcl", shBlock(tt.script, tt.extra))
			res := call(h, stepMessage("{\"sku\":\"A-1\"}\n"))
			if res.Err != nil || res.Outcome != tt.want || string(res.Output) != tt.output {
				t.Errorf("got %v %v output %q; want %v output %q", res.Outcome, res.Err, res.Output, tt.want, tt.output)
			}
			if got := payloads(res.Emits); len(tt.emits) > 0 && !reflect.DeepEqual(got, tt.emits) {
				t.Errorf("emits %q, want %q", got, tt.emits)
			}
		})
	}
	// Outside a workflow stdout is not read, and nothing is recorded.
	if res := call(build(t, "h.hcl", shBlock("echo hi", "")), message("", nil, 1)); res.Outcome != Ack() || res.Output != nil {
		t.Errorf("outside a workflow: %+v", res)
	}
}

// provisionMocked provisions a handler with a test's mock in place of the outside world, as
// `flowrun test` does, and returns the engine's handler.
func provisionMocked(t *testing.T, handlerSrc, mockSrc string) handlers.Instance {
	t.Helper()
	cfg, diags := decodeHandler(t, "h.hcl", handlerSrc)
	if diags.HasErrors() {
		t.Fatalf("handler: %s", diags)
	}
	m, diags := decodeMock(t, handlerNameOf(handlerSrc), mockSrc)
	if diags.HasErrors() {
		t.Fatalf("mock: %s", diags)
	}
	inst, err := cfg.Provision(context.Background(), handlers.Env{Pipeline: "order/charge", Logger: zerolog.Nop(), Mock: m})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	t.Cleanup(func() { _ = inst.Close() })
	return inst
}

// TestMockedStepOutput: in `flowrun test` the mocks answer the built-ins' real code, so a step's
// output comes from the mock's body or stdout, through the engine's handler.
func TestMockedStepOutput(t *testing.T) {
	tests := []struct {
		name, handler, mock, output string
	}{
		{"http", httpBlock("http://127.0.0.1:1/charge", ""), `mock { body = "{\"id\": \"ch_1\"}" }`, `{"id":"ch_1"}`},
		{"exec", shBlock("exit 0", ""), `mock { stdout = "charged\n" }`, `"charged"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst := provisionMocked(t, tt.handler, tt.mock)
			d := &engine.Delivery{Message: engine.Message{Key: "k", Headers: map[string]string{}, Payload: []byte(`{}`)},
				Attempt: 1, Run: testRun().engineRun()}
			res := inst.Handle(context.Background(), d)
			got, _ := d.Run.Output.(json.RawMessage)
			if res.Err != nil || res.Outcome != engine.Ack() || !d.Run.HasOutput || string(got) != tt.output {
				t.Errorf("got %+v, output %q (%v); want %q", res, got, d.Run.HasOutput, tt.output)
			}
		})
	}
}
