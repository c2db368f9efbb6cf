// Package plugins is flowrun's Go handler API (SPEC §8): the registry of compiled handlers, the
// helpers a handler author uses, and the built-in handlers log, http and exec.
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
// A handler lives in an ordinary Go package of your own module, which registers it by name in
// init:
//
//	package payouts
//
//	type Config struct {
//		Base string `hcl:"base,optional"` // durations are strings: "250ms", "30s", "1h"
//		Max  string `hcl:"max,optional"`
//		base, max time.Duration // parsed by ValidateBlock
//	}
//
//	func init() {
//		plugins.Register(plugins.Plugin{
//			Name:   "payout",
//			Doc:    "pays out one payout per message", // shown by `flowrun plugins`
//			Config: func() any { return &Config{Base: "1s", Max: "1m"} }, // defaults
//			New: func(ctx context.Context, cfg any, env plugins.Env) (engine.Handler, error) {
//				return &handler{cfg: cfg.(*Config), log: env.Logger}, nil
//			},
//		})
//	}
//
//	func (h *handler) Handle(ctx context.Context, d *engine.Delivery) engine.Result {
//		...
//		return engine.Result{Outcome: engine.Ack()}
//	}
//
// Register panics on an empty or duplicate name: that is a programmer's mistake, seen the first
// time the binary starts. A user's mistake in the HCL is a diagnostic, below.
//
// # Configuration and diagnostics
//
// Config returns a pointer to a fresh config struct, with defaults already set, whose fields
// carry gohcl tags: `hcl:"name"` (required), `hcl:"name,optional"`, `hcl:"name,block"` for a
// nested block (a pointer field for an optional one). Plugin.Decode decodes the handler block's
// body into it, evaluating env(), file() and jsonencode() like every other attribute. Unknown
// attributes, missing required ones and wrong types are reported as FILE:LINE:COL diagnostics,
// together with every other problem of the load, before anything starts.
//
// Checks beyond types go in an optional method of the config struct. BlockValidator's
// ValidateBlock gets a Block: the attributes written, with their ranges, and helpers that put
// a diagnostic where it belongs:
//
//	func (c *Config) ValidateBlock(b plugins.Block) hcl.Diagnostics {
//		var diags hcl.Diagnostics
//		var d *hcl.Diagnostic
//		if c.base, d = b.Duration("base", c.Base); d != nil { // points at the value of base
//			diags = append(diags, d)
//		}
//		...
//		if c.base > c.max {
//			diags = append(diags, b.Error("base", "Invalid value", `"base" must not exceed "max".`))
//		}
//		return diags
//	}
//
// Block.Range and Block.Error point at an attribute's value, or at the block's header when the
// attribute was not written; Block.Child indexes a nested block; Block.Path resolves a path
// relative to the HCL file, as flowrun does for every path. The simpler Validator interface gets
// only the block's header range. ValidateBlock runs in `flowrun validate` too, so it may read
// local files (a certificate) but must not connect anywhere.
//
// # Lifecycle
//
// In order, for a handler used by a pipeline:
//
//  1. Decode, then ValidateBlock or Validate: at every load (`run`, `validate`, `test`).
//  2. New(ctx, cfg, env): once per pipeline, by `flowrun run` only. env.Logger is a zerolog
//     logger already scoped with the pipeline, source and handler fields; keep it and log with
//     it. Build what you need; keep slow I/O (dialing a gateway) for Start.
//  3. Start(ctx), when the handler implements Starter: after every pipeline is built, before
//     the first message is read. An error stops the run before anything is consumed. ctx bounds
//     start-up only; a goroutine started here must be stopped by Close.
//  4. Handle(ctx, d), concurrently: up to the pipeline's concurrency calls at once, so a
//     handler must be safe for concurrent use.
//  5. Close(), when the handler implements Closer: once, after the last Handle has returned.
//     Close is also called when the run fails after New succeeded, so it must cope with a
//     handler that was never started.
//
// # Handling a delivery
//
// Handle gets a context and an *engine.Delivery: the message (d.Key, d.ID, d.Headers,
// d.Payload; SPEC §3) and its attempt number d.Attempt (1 for a first delivery; SPEC §5), plus,
// for claiming and reclaim sources, d.DeliveryCount and d.IdleMS. The delivery belongs to the
// engine: read it, do not change it or keep it after Handle returns (d.Message.Clone gives a
// copy to change).
//
// The context is not cancelled by the stop signal: after a stop, in-flight handlers may finish
// within the pipeline's shutdown_timeout, and the context is cancelled only when that grace runs
// out. Pass it to every call that can block, and return soon after it is done (a retry is the
// honest outcome then).
//
// Handle returns an engine.Result:
//
//   - Outcome: engine.Ack() (done), engine.Drop() (done, deliberately ignored),
//     engine.Retry() (again, now), engine.RetryAfter(d) (again, after d; see Backoff),
//     engine.DeadLetter(reason) (never: straight to the pipeline's dead_letter with reason in
//     x-dead-letter-reason, whatever the attempt). Retries count against max_attempts, and the
//     attempt that reaches it goes to the dead letter instead (SPEC §5). Without a dead_letter,
//     a dead-lettered delivery is acknowledged and logged as rejected.
//   - Emits: messages written before the delivery is settled, each an engine.Emit with a
//     Target and a *engine.Message whose Key is the destination key. Target.Kind is "record"
//     (a JSON-lines record on stdout, or appended to the stream file Target.Path), or "stream",
//     "list" or "pubsub" (Redis, through the redis block named by Target.Redis; empty means the
//     source's own or the only redis block). If writing them fails, the delivery is retried,
//     so an emit may be written twice but is never lost.
//   - Err: a failure. A non-nil Err counts as a retry (an Outcome of ack or drop is overridden)
//     and is logged with the message's key, id and attempt. Do not also log it yourself.
//
// A panic inside Handle is recovered by the engine and counts as a retry; the panic value and
// the stack are logged once for that delivery. The process never crashes for a handler's sake.
//
// # A custom binary
//
// flowrun's command line is the package github.com/flowrun/flowrun/cli. A binary with your
// handlers is flowrun's own main plus one import:
//
//	package main
//
//	import (
//		"github.com/flowrun/flowrun/cli"
//		_ "github.com/flowrun/flowrun/plugins" // the built-in handlers
//		_ "example.com/you/payouts"            // your handler
//	)
//
//	func main() { cli.Main() }
//
// `flowrun plugins` lists what is compiled in. The repository's examples/custom is a complete
// one, with its HCL and tests.
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
// One client with one connection pool serves each pipeline.
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
// letter, never a silent cut).
package plugins
