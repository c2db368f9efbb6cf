package pipe

// What the reference in docs/ says about the pipe kind; `go generate ./docs` renders it next to
// the attributes declared in register.go, and the docs' tests validate the example.

const pipeDoc = `Reads records from standard input, one JSON object per line
(` + "`{\"key\":\"events\",\"headers\":{…},\"payload\":…}`" + `), so flowrun works as a Unix filter: emits of kind
` + "`record`" + ` without a ` + "`path`" + `, retry copies (under ` + "`out_retry`" + `) and dead letters (records with the
` + "`dead_letter`" + ` key) all leave on standard output; logs go to standard error. A line that is not a
record is logged with its line number, counted and skipped. The message's ` + "`key`" + ` is the record's key;
it has no ` + "`id`" + `. ` + "`attempt`" + ` is ` + "`x-retry-count`" + ` + 1, so a copy fed back in counts on.

At the end of the input flowrun waits for held retry copies to come due (at most
` + "`shutdown_timeout`" + `), writes them and exits 0. A closed standard output (the reader has gone) is a
permanent failure.

## How each outcome settles

| outcome | what flowrun does |
|---|---|
| ` + "`ack`, `drop`" + ` | nothing to settle |
| ` + "`retry`" + ` | a copy on stdout under ` + "`out_retry`" + `, only when the pipeline declares ` + "`max_attempts`" + ` or ` + "`dead_letter`" + ` |
| ` + "`retry_after(d)`" + ` | the same copy, held in the process and written when due |
| dead letter | a record with the ` + "`dead_letter`" + ` key on stdout |

    printf '%s\n' '{"key":"events","payload":{"type":"signup","user":"ada"}}' | flowrun run events.hcl

## What a crash costs

Pipes have no ` + "`delayed_retry`" + ` mode: a ` + "`retry_after(d)`" + ` copy is held in the process until it is due, so a
crash (` + "`kill -9`" + `) before then **loses it**, as it loses lines read and not yet handled; a clean stop
(SIGINT, SIGTERM) or the end of the input writes every held copy.
`

// pipeExample is the pipeline of examples/pipe.hcl (TestReferenceExampleIsTheExampleFile).
const pipeExample = `pipeline "events" {
  source "pipe" {
    key = "events" # default: every key
  }

  out_retry    = "events.retry" # retry copies leave on stdout under this key
  max_attempts = 3
  dead_letter  = "events.dead"

  rule "welcome" {
    when = "payload.type == 'signup'"
    emit "record" {
      key     = "emails"
      payload = "{'to': payload.user, 'template': 'welcome'}"
    }
    outcome = "ack"
  }
  rule "not-yet" {
    when    = "headers['ready'] == 'no'"
    outcome = "retry_after('200ms')"
  }
  otherwise = "drop"
}
`
