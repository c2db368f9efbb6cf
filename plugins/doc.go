// Package plugins is flowrun's Go handler API (SPEC §8): what a handler author imports, and the
// built-in handlers log, http and exec, which use nothing else. A handler package imports
// plugins; its binary's main imports cli. Nothing of flowrun's engine shows through, so the
// engine can change without breaking a handler.
//
// A pipeline hands each message either to its rules or to one compiled Go handler, named by a
// `handler "NAME" {}` block whose body is that handler's own configuration:
//
//	pipeline "payouts" {
//	  source "stream" { stream = "payouts" }
//	  max_attempts = 5
//	  dead_letter  = "payouts.dlq"
//	  handler "payout" {
//	    base = "500ms"
//	    max  = "1m"
//	  }
//	}
//
// # Writing a handler
//
// A handler lives in an ordinary Go package of your own module. It declares its configuration
// as a struct and registers a Spec for it in init:
//
//	package payouts
//
//	import (
//		"context"
//		"time"
//
//		"github.com/flowrun/flowrun/plugins"
//	)
//
//	type Config struct {
//		Base    time.Duration `hcl:"base,optional"` // written "500ms", arrives parsed
//		Max     time.Duration `hcl:"max,optional"`
//		DoneKey string        `hcl:"done_key,optional"`
//	}
//
//	func init() {
//		plugins.Register(plugins.Spec[Config]{
//			Name:     "payout",
//			Doc:      "pays out one payout per message", // shown by `flowrun plugins`
//			Defaults: func() Config { return Config{Base: time.Second, Max: time.Minute} },
//			Validate: func(c Config, b plugins.Block) error {
//				if c.Base > c.Max {
//					return b.Errorf("base", "Invalid value", `"base" must not exceed "max".`)
//				}
//				return nil
//			},
//			Provision: func(ctx context.Context, c Config, env plugins.Env) (plugins.Handler, error) {
//				return &handler{cfg: c, log: env.Logger}, nil
//			},
//		})
//	}
//
//	func (h *handler) Handle(ctx context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
//		...
//		if gatewayDown {
//			return plugins.RetryAfter(plugins.Backoff(h.cfg.Base, h.cfg.Max, m.Attempt())), nil
//		}
//		emit.Emit(plugins.ToRecord(h.cfg.DoneKey), receipt, nil)
//		return plugins.Ack(), nil
//	}
//
// Register panics on an empty or duplicate name, a missing Provision, or a config type gohcl
// cannot use: a programmer's mistake, seen the first time the binary starts. A user's mistake in
// the HCL is a diagnostic, below. Example_handler is a complete handler, run.
//
// # Configuration and diagnostics
//
// The config struct's fields carry gohcl tags: `hcl:"name"` (required), `hcl:"name,optional"`,
// `hcl:"name,block"` for a nested block (a struct, a pointer to one when it is optional, or a
// slice for any number), `hcl:"name,label"` inside a nested block. Defaults returns the config
// before decoding; decoding overwrites only what the user wrote. The body is decoded with
// flowrun's functions (env(), file(), jsonencode()) like every other attribute. A time.Duration
// (or *time.Duration) field is written as a Go duration string, "250ms", "30s" or "1h", and
// arrives parsed; one that is not a duration, or is negative, is reported at its value. Unknown
// attributes, missing required ones and wrong types are reported too, all of them as
// FILE:LINE:COL diagnostics together with every other problem of the load, before anything
// starts:
//
//	pipelines/payouts.hcl:9:12: error: Invalid duration: "1 s" is not a duration: unknown unit " s" in duration "1 s". Write a Go duration such as "250ms", "30s" or "1h".
//
// Validate checks what the types cannot. It gets the decoded config and a Block: b.Errorf makes
// an error that is reported at the value of the attribute it names (at the block's header when
// that attribute was not written); b.Child gives a nested block's; b.Path resolves a path
// relative to the HCL file, as flowrun does for every path. Return every error at once with
// errors.Join; a plain error is reported at the block's header. Validate runs at every load,
// `flowrun validate` included, so it may read local files (a certificate) but must not connect
// anywhere. While a value has the wrong type Validate does not run: checks of a half-decoded
// config would only add noise. A duration that does not parse keeps its default and Validate
// runs, so the user sees every mistake at once.
//
// Validate and Provision both get the config as decoded, by value: Validate cannot hand anything
// to Provision, and Provision does not need to check again. What Provision derives (a parsed
// URL, a TLS configuration, an absolute path through env.Path) it keeps in the handler it
// returns.
//
// # Lifecycle
//
// In order, for a handler used by a pipeline:
//
//  1. Decode, then Validate: at every load (`run`, `validate`, `test`).
//  2. Provision(ctx, cfg, env): once per pipeline by `flowrun run`, and once per test by `flowrun
//     test` (below). env.Logger is a zerolog logger already scoped with the pipeline, source and
//     handler fields; keep it and log with it. Build what you need; keep slow I/O (dialing a
//     gateway) for Start.
//  3. Start(ctx), when the handler implements Starter: by `flowrun run` only, after every
//     pipeline is provisioned, before the first message is read. An error stops the run before anything is consumed. ctx
//     bounds start-up only; a goroutine started here must be stopped by Close.
//  4. Handle(ctx, m, emit), concurrently: up to the pipeline's concurrency calls at once, so a
//     handler must be safe for concurrent use.
//  5. Close(), when the handler implements Closer: once, after the last Handle has returned.
//     Close is also called when the run fails after Provision succeeded, so it must cope with a
//     handler that was never started.
//
// # Handling a message
//
// Handle gets a context, the Message and an Emitter, and returns an Outcome and an error.
//
// The Message is a read-only view of the delivery: Key, ID, Header, LookupHeader, Headers (in
// name order), Payload (a copy, yours to change), PayloadReader (no copy) and Attempt (1 for a
// first delivery; SPEC §5), plus DeliveryCount and IdleMS for claiming and reclaim sources, and
// Run in a workflow step (below). Do not keep it after Handle returns.
//
// The context is not cancelled by the stop signal: after a stop, in-flight handlers may finish
// within the pipeline's shutdown_timeout, and the context is cancelled only when that grace runs
// out. Pass it to every call that can block, and return soon after it is done (a retry is the
// honest outcome then). When flowrun exports traces (docs/tracing.md), the context carries the
// delivery's handler span: trace.SpanFromContext(ctx) (go.opentelemetry.io/otel/trace) to add
// events or attributes, otel.GetTextMapPropagator().Inject to pass traceparent to your own
// clients; without tracing both are no-ops. Emitted messages get their traceparent from flowrun.
//
// The outcome is one of Ack() (done), Drop() (done, deliberately ignored), Retry() (again, now),
// RetryAfter(d) (again, after d; see Backoff) and DeadLetter(reason) (never: straight to the
// pipeline's dead_letter with reason in x-dead-letter-reason, whatever the attempt). Retries
// count against max_attempts, and the attempt that reaches it goes to the dead letter instead.
// Without a dead_letter, a dead-lettered delivery is acknowledged and logged as rejected. The zero
// Outcome is no decision: a handler that returns it (and no error) is retried with the mistake
// logged, never acknowledged by accident.
//
// A non-nil error counts as a retry (with Ack, Drop or no outcome; RetryAfter and DeadLetter
// stand) and is logged with the message's key, id and attempt. Do not also log it yourself.
//
// Emit writes a message before the delivery is settled, to a typed target: ToStream(key),
// ToList(key) or ToChannel(channel) in Redis, through the source's own redis block (else the only
// one) or the one named with .Via(name); or ToRecord(key), a JSON-lines record on stdout, or
// appended to a stream file with .InFile(path) (relative to the HCL file). Emits are written only
// when Handle returns no error; if writing them fails the delivery is retried, so an emit may be
// written twice but is never lost. A bad target (nil, or an empty key) fails the delivery.
//
// A panic inside Handle is recovered by the engine and counts as a retry; the panic value and
// the stack are logged once for that delivery. The process never crashes for a handler's sake.
//
// # A handler in a workflow step
//
// A workflow step (SPEC §16) may be a Go handler: handler "NAME" {} inside a step block. It is
// handled as in a pipeline (attempts, max_attempts, outcomes, emits), and sees its run through
// m.Run(), which reports false for a pipeline's message: the run's ID, Workflow, the Step and
// its Visit number, StartedAt, the run's Input and the finished steps' outputs (Steps), decoded
// JSON, copies the handler may change. The step records what the handler passes to
// emit.Output(v), v as encoding/json writes it (a json.RawMessage as it is; the last call
// wins; like an emit, it counts only when Handle returns no error); outside a workflow Output
// does nothing, so one handler serves both. Ack finishes the step and moves the run on; retries
// retry the step; Drop cancels the run and a dead letter fails it.
//
// A step's handler runs at least once per visit, and again after a crash before the visit was
// recorded: the header x-idempotency-key, <workflow>/<run>/<step>/<visit> (the same across the
// retries of one visit), is what to give the service you call so it does the work once. Call
// with a TestMessage whose Run is set hands the handler such a visit and reports the output in
// Result.Output.
//
// # Testing a handler
//
// Check reads a handler block from HCL text and returns its diagnostics as one error, a line each,
// as the command line prints them. Build also provisions the handler, and Call hands it one
// TestMessage as the engine would, returning the Result the engine would act on: the outcome
// (with the rules above applied), the emits and the error. Outcomes and targets compare with ==:
//
//	h, err := plugins.Build(ctx, "payouts.hcl", `handler "payout" { done_key = "done" }`)
//	res := plugins.Call(ctx, h, plugins.TestMessage{Key: "payouts", Payload: []byte(`{"id":1,"amount":5}`)})
//	if res.Outcome != plugins.Ack() || res.Emits[0].To != plugins.ToRecord("done") { ... }
//
// # Config tests
//
// `flowrun test` (SPEC §9) runs the test blocks of the HCL files, pipelines with a Go handler
// included: for each test it provisions the pipeline's handler as `flowrun run` does, hands it
// the test's message, compares the outcome and the emits with the test's expect block, and closes
// the handler. It does not call Start, since a test connects nowhere: Provision must not dial,
// and a Handle that needs what Start sets up should return Retry with an error rather than
// panic (a panic fails the test, saying so). Nothing else is left out: your handler runs as
// compiled, so a test of a handler that calls a service needs a way, in its configuration, to
// call none (examples/custom's "payout" simulates its gateway, and is down for a message with
// the header gateway = "down").
//
// The built-in http and exec handlers call out, so a test of a pipeline that uses one needs a
// mock block, which stands in for the server or the process; the handler runs its real logic
// on the mocked answer (the request is built, Retry-After is read, the last line of stderr goes
// into the reason, emit_stdout emits):
//
//	test "a busy hook is tried again later" {
//	  pipeline = "hooks"                      # handler "http" { ... }
//	  message { payload = jsonencode({ id = 1 }) }
//	  mock {
//	    status  = 503                         # default 200
//	    headers = { "Retry-After" = "7" }
//	    body    = "busy"
//	  }
//	  expect {
//	    outcome   = "retry_after"             # any delay, within min_delay and max_delay
//	    min_delay = "5s"
//	    max_delay = "10s"
//	  }
//	}
//
//	test "a declined card is dead-lettered" {
//	  pipeline = "charges"                    # handler "exec" { ... }
//	  mock {
//	    exit   = 2                            # default 0; 75 is retry
//	    stdout = ""                           # what emit_stdout reads
//	    stderr = "card declined"
//	  }
//	  expect {
//	    outcome = "dead_letter"
//	    reason  = "exit status 2: card declined" # the reason must contain this
//	  }
//	}
//
// # A custom binary
//
// flowrun's command line is the package github.com/flowrun/flowrun/cli, with the built-in
// handlers. A binary with your handlers is flowrun's own main plus one import:
//
//	package main
//
//	import (
//		"github.com/flowrun/flowrun/cli"
//		_ "example.com/payouts/handler" // your handlers, registered in init
//	)
//
//	func main() { cli.Main() }
//
// `flowrun plugins` lists what is compiled in. The repository's examples/custom is a complete
// one, with its HCL and tests: go build -o payouts ./examples/custom.
//
// # Building against a local checkout
//
// flowrun is not published as a module yet, so `go get github.com/flowrun/flowrun@latest` fails:
// the module proxy answers that it has no such module (404 Not Found, or 403 "This module version
// is not available"). Build against a checkout instead. Clone flowrun next to your module:
//
//	work/
//	  flowrun/              git clone of github.com/flowrun/flowrun
//	  payouts/              your module
//	    go.mod
//	    main.go             the main above
//	    handler/handler.go  your handler package
//
// and in payouts/go.mod require flowrun at the placeholder version v0.0.0 and replace it with
// the checkout:
//
//	module example.com/payouts
//
//	go 1.26.8
//
//	require github.com/flowrun/flowrun v0.0.0
//
//	replace github.com/flowrun/flowrun => ../flowrun
//
// Then build once with -mod=mod, which lets the go command add flowrun's own requirements to
// go.mod and go.sum (go mod tidy does the same); later builds need no flag:
//
//	cd payouts
//	go build -mod=mod -o payouts .
//	./payouts plugins
//
// TestGuideCustomBinary builds such a module against this checkout, as written here.
//
// # Built-in handlers
//
// log takes no configuration: it logs each message at info and acknowledges it.
//
// http sends each message as one request:
//
//	handler "http" {
//	  url           = "https://hooks.example.com/payouts"   # required, http:// or https://
//	  method        = "POST"                                # default POST
//	  timeout       = "10s"                                 # default 10s, the whole exchange
//	  headers       = { Authorization = env("HOOK_TOKEN") } # extra request headers
//	  header_prefix = "X-Flowrun-"                          # default; "" sends headers as named
//	  tls {                                                 # optional; paths relative to the file
//	    ca_file              = "ca.pem"
//	    cert_file            = "client.pem"                 # with key_file: a client certificate
//	    key_file             = "client-key.pem"
//	    server_name          = "hooks.example.com"
//	    insecure_skip_verify = false
//	  }
//	}
//
// The payload is the body, with Content-Type application/json when it is valid JSON and
// application/octet-stream otherwise. Each message header goes as header_prefix + its name,
// which HTTP canonicalises: x-retry-count arrives as X-Flowrun-X-Retry-Count (HTTP header names
// are case-insensitive). A header whose name is not an HTTP token or whose value holds a control
// character is left out (logged at debug). The configured headers are set last and win, Content-Type
// included; a Host entry sets the request's host. Outcomes: 2xx → ack; 429 and 5xx → retry_after
// the Retry-After header's delay (seconds or an HTTP date; a past date means now; capped at 24h),
// else after Backoff(1s, 5m, attempt); any other status → dead letter with a reason such as
// "http 400 Bad Request: {"error":"no amount"}" (the status, then up to 200 bytes of the body);
// a connection error, TLS failure or timeout → retry, with the error logged. Redirects are
// followed only for 307 and 308, which keep the method and body; a 301, 302 or 303 is a status
// like any other (dead letter), since following it would turn a POST into a bodiless GET.
// One client with one connection pool serves each pipeline. A message with the header
// x-idempotency-key (every workflow step's) sends it as the request header Idempotency-Key
// too. In a workflow step, a 2xx response's body is the step's output: its JSON when it is
// JSON, else the body as a string; a body over 1 MiB is a dead letter.
//
// exec runs one process per message, without a shell:
//
//	handler "exec" {
//	  command     = ["./bin/charge", "--live"] # required, argv
//	  timeout     = "30s"                      # default 30s
//	  dir         = "work"                     # optional working directory, relative to the file
//	  emit_stdout = "charges.done"             # optional: stdout lines become records of this key
//	}
//
// A relative program path is resolved against dir when set, else flowrun's working directory;
// a bare name is looked up in PATH, and `flowrun run` refuses to start when it is not found.
// The payload is the process's stdin. Its environment is flowrun's, plus each message header as
// FLOWRUN_HEADER_<NAME> (upper case, every character other than a letter, digit or '_' as '_',
// so x-retry-count is FLOWRUN_HEADER_X_RETRY_COUNT), FLOWRUN_KEY, FLOWRUN_ID and FLOWRUN_ATTEMPT.
// Exit 0 → ack; exit 75 (EX_TEMPFAIL) → retry; any other exit, a signal included → dead letter
// with a reason such as "exec: exit status 3: card declined" (the status, then the last line of
// stderr; only the last 4 KiB of stderr is kept). On timeout, or when the shutdown grace runs
// out, the command's whole process group is killed (it runs in a group of its own) and the
// outcome is retry. Without emit_stdout, stdout is discarded (flowrun's own stdout may carry
// records); with it, after exit 0, each non-blank line is emitted as a record under that key,
// written to flowrun's stdout like a rule's emit "record" (more than 4 MiB of stdout is a dead
// letter, never a silent cut). In a workflow step stdout is the step's output after exit 0: its
// JSON when it is JSON, else the text as a string without its trailing line breaks (as a
// shell's $(...) reads it); more than 1 MiB is a dead letter.
package plugins
