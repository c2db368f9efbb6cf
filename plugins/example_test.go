package plugins_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/flowrun/flowrun/plugins"
)

// mustBuild builds the one handler block in src, as `flowrun run` would.
func mustBuild(src string) plugins.Handler {
	h, err := plugins.Build(context.Background(), "example.hcl", src)
	if err != nil {
		panic(err)
	}
	return h
}

// The log handler logs each message at info, with its key, id, attempt, headers and payload,
// and acknowledges it.
func Example_log() {
	h := mustBuild(`handler "log" {}`)
	res := plugins.Call(context.Background(), h, plugins.TestMessage{Key: "orders", Payload: []byte(`{"id":1}`)})
	fmt.Println(res.Outcome, res.Err)
	// Output:
	// ack <nil>
}

// The http handler posts each message; the status decides the outcome.
func Example_http() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("  %s %s %s trace=%s: %s\n", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("X-Flowrun-Trace-Id"), body)
		switch r.Header.Get("X-Flowrun-Gateway") {
		case "down":
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "bad":
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"amount must be positive"}`)
		}
	}))
	defer srv.Close()

	h := mustBuild(fmt.Sprintf(`
handler "http" {
  url     = "%s/payouts"
  timeout = "5s"
  headers = { Authorization = "Bearer secret" }
}
`, srv.URL))
	defer h.(plugins.Closer).Close()

	for _, gateway := range []string{"up", "down", "bad"} {
		res := plugins.Call(context.Background(), h, plugins.TestMessage{
			Key:     "payouts",
			Headers: map[string]string{"trace-id": "t-1", "gateway": gateway},
			Payload: []byte(`{"id":7,"amount":12}`),
		})
		fmt.Println(res.Outcome)
	}
	// Output:
	//   POST /payouts application/json trace=t-1: {"id":7,"amount":12}
	// ack
	//   POST /payouts application/json trace=t-1: {"id":7,"amount":12}
	// retry_after(30s)
	//   POST /payouts application/json trace=t-1: {"id":7,"amount":12}
	// dead_letter("http 422 Unprocessable Entity: {\"error\":\"amount must be positive\"}")
}

// The exec handler runs a command per message: payload on stdin, headers in the environment,
// the exit status decides; with emit_stdout, the lines it prints become records.
func Example_exec() {
	h := mustBuild(`
handler "exec" {
  command     = ["/bin/sh", "-c", <<-EOT
    read -r payload
    case "$FLOWRUN_HEADER_GATEWAY" in
      down) echo "gateway down" >&2; exit 75 ;;
      bad)  echo "card declined" >&2; exit 3 ;;
    esac
    echo "paid $payload on attempt $FLOWRUN_ATTEMPT"
  EOT
  ]
  timeout     = "5s"
  emit_stdout = "payouts.done"
}
`)
	for _, gateway := range []string{"up", "down", "bad"} {
		res := plugins.Call(context.Background(), h, plugins.TestMessage{
			Key:     "payouts",
			Headers: map[string]string{"gateway": gateway},
			Payload: []byte("7\n"),
			Attempt: 2,
		})
		fmt.Println(res.Outcome)
		for _, e := range res.Emits {
			fmt.Printf("  emit %s: %s\n", e.To, e.Payload)
		}
	}
	// Output:
	// ack
	//   emit record "payouts.done": paid 7 on attempt 2
	// retry
	// dead_letter("exec: exit status 3: card declined")
}

// A handler that forgets its outcome has not acknowledged anything: the zero Outcome is an
// error, so the delivery is retried and the mistake logged.
func Example_noOutcome() {
	forgetful := plugins.HandlerFunc(func(ctx context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
		emit.Emit(plugins.ToStream("audit"), m.Payload(), nil)
		var o plugins.Outcome // never set
		return o, nil
	})
	res := plugins.Call(context.Background(), forgetful, plugins.TestMessage{Key: "orders"})
	fmt.Println(res.Outcome, len(res.Emits))
	fmt.Println(res.Err)
	// Output:
	// retry 0
	// handler returned no outcome (the zero plugins.Outcome): return plugins.Ack(), Drop(), Retry(), RetryAfter(d) or DeadLetter(reason)
}

// Emit targets are typed: a Redis stream, list or channel, through the default redis block or a
// named one, or a JSON-lines record on stdout or in a stream file.
func ExampleEmitter_Emit() {
	h := plugins.HandlerFunc(func(ctx context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
		emit.Emit(plugins.ToStream("orders.accepted"), m.Payload(), map[string]string{"order": m.ID()})
		emit.Emit(plugins.ToList("orders.jobs").Via("jobs"), m.Payload(), nil)
		emit.Emit(plugins.ToChannel("orders.events"), []byte("accepted"), nil)
		emit.Emit(plugins.ToRecord("orders.audit").InFile("audit.jsonl"), m.Payload(), nil)
		return plugins.Ack(), nil
	})
	res := plugins.Call(context.Background(), h, plugins.TestMessage{Key: "orders", ID: "1-0", Payload: []byte(`{"id":1}`)})
	for _, e := range res.Emits {
		fmt.Println(e.To)
	}
	// Output:
	// stream "orders.accepted"
	// list "orders.jobs" via "jobs"
	// pubsub "orders.events"
	// record "orders.audit" in "audit.jsonl"
}

// ForwardHeaders carries the delivery's own headers (tenant, trace) on to an emit, as a rule's
// forward_headers = true does; flowrun's x- headers stay behind.
func ExampleMessage_ForwardHeaders() {
	h := plugins.HandlerFunc(func(ctx context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
		headers := m.ForwardHeaders()
		headers["stage"] = "billed"
		delete(headers, "trace")
		emit.Emit(plugins.ToStream("orders.billed"), m.Payload(), headers)
		return plugins.Ack(), nil
	})
	res := plugins.Call(context.Background(), h, plugins.TestMessage{
		Key:     "orders",
		Headers: map[string]string{"tenant": "acme", "trace": "t-1", "x-retry-count": "2"},
		Payload: []byte(`{"id":1}`),
	})
	fmt.Println(res.Emits[0].Headers)
	// Output:
	// map[stage:billed tenant:acme]
}
