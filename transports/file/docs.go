package file

// What the reference in docs/ says about the file kind; `go generate ./docs` renders it next to
// the attributes declared in register.go, and the docs' tests validate the example.

const fileDoc = `Reads a *stream file*: one JSON record per line, ` + "`{\"key\":\"orders\",\"headers\":{…},\"payload\":…}`" + `
(a string payload is taken as its bytes, any other JSON value as its JSON text). A line that is not
such a record is logged with its line number, counted and skipped; it never stops the run. The
message's ` + "`key`" + ` is the record's key and its ` + "`id`" + ` the line number. Without ` + "`follow`" + ` it is a replay: at the
end of the file flowrun waits for held retry copies to come due (at most ` + "`shutdown_timeout`" + `), writes
them and exits 0, with a summary line.

A file source never reads its own dead letters: without ` + "`key`" + ` it reads every key but the pipeline's
` + "`dead_letter`" + `, so a followed file that receives dead letters does not read them back. Retry copies are
appended under the record's own key and read again while the replay has not reached the end.
Settling is idempotent per delivery: a settlement sent again after a failure never appends a copy
or a dead letter twice. ` + "`attempt`" + ` is ` + "`x-retry-count`" + ` + 1.

## How each outcome settles

| outcome | what flowrun does |
|---|---|
| ` + "`ack`, `drop`" + ` | nothing to write; the ` + "`checkpoint`" + ` may advance past the record |
| ` + "`retry`" + ` | a copy appended to the file, only when the pipeline declares ` + "`max_attempts`" + ` or ` + "`dead_letter`" + ` |
| ` + "`retry_after(d)`" + ` | a copy held in the process, appended when due |
| dead letter | a record with the ` + "`dead_letter`" + ` key appended to the file |

## What a crash costs

Files have no ` + "`delayed_retry`" + ` mode: a ` + "`retry_after(d)`" + ` copy is held in the process until it is due. A
crash (` + "`kill -9`" + `) before then **loses it** once a ` + "`checkpoint`" + ` has moved past its original (without a
` + "`checkpoint`" + `, the next run replays the file from the start); a clean stop (SIGINT, SIGTERM) appends
every held copy at once. Records not yet settled are before the checkpoint, and read again.
`

const fileExample = `pipeline "orders" {
  source "file" {
    path       = "data/orders.jsonl"  # relative to this file
    key        = "orders"             # default: every key but the dead letter's
    follow     = false                # stop at the end of the file
    checkpoint = "data/orders.offset" # resume where the last run stopped
  }

  concurrency  = 1
  max_attempts = 3
  dead_letter  = "orders.dead"

  rule "needs-review" {
    when = "(payload.amount ?? 0) > 10000"
    emit "record" {
      key     = "orders.review"
      headers = { reason = "'amount over 10000'" }
    }
    outcome = "ack"
  }
  rule "accepted" {
    emit "record" {
      key  = "orders.accepted"
      path = "data/accepted.jsonl" # append to a file instead of stdout
    }
    outcome = "ack"
  }
}
`
