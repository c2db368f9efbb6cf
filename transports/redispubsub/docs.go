package redispubsub

// What the reference in docs/ says about the pubsub kind; `go generate ./docs` renders it next to
// the attributes declared in register.go, and the docs' tests validate the example.

const pubsubDoc = `Subscribes to ` + "`channels`" + ` (` + "`SUBSCRIBE`" + `) or ` + "`patterns`" + ` (` + "`PSUBSCRIBE`" + `). Pub/Sub is at most once by
nature: a message published while flowrun is disconnected, or dropped by Redis because a
subscriber fell behind, is gone. flowrun resubscribes after a reconnect and replaces a connection
that stops answering ` + "`PING`" + `.

A message that is a JSON object with ` + "`payload`" + ` (and optionally ` + "`headers`" + `, an object of strings) is an
envelope; anything else is a bare payload without headers. The message's ` + "`key`" + ` is the channel it
was published to; it has no ` + "`id`" + `. ` + "`attempt`" + ` is ` + "`x-retry-count`" + ` + 1. Dead letters are a **stream**
(` + "`dead_letter`" + `), so they are kept; ` + "`flowrun dlq redrive`" + ` publishes them back to their channel.

## How each outcome settles

| outcome | what flowrun does |
|---|---|
| ` + "`ack`, `drop`" + ` | nothing to settle (logged at debug, counted) |
| ` + "`retry`" + ` | ` + "`PUBLISH`" + ` a copy to the channel (to ` + "`retry_to`" + ` for patterns), only when the pipeline declares ` + "`max_attempts`" + ` or ` + "`dead_letter`" + ` |
| ` + "`retry_after(d)`" + ` | the same copy, held in the process until it is due |
| dead letter | ` + "`XADD`" + ` to the ` + "`dead_letter`" + ` stream |

## What a crash costs

Pub/Sub has no ` + "`delayed_retry`" + ` mode: a ` + "`retry_after(d)`" + ` copy is held in the process until it is due, so
a crash (` + "`kill -9`" + `) before then **loses it**, as it loses messages received and not yet handled; a clean
stop (SIGINT, SIGTERM) publishes every held copy at once.
`

const pubsubExample = `redis "main" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

pipeline "audit" {
  source "pubsub" {
    patterns = ["orders.*", "payments.*"] # or channels = ["orders.created"]
  }

  retry_to     = "audit.retry" # where retry copies are published (patterns only)
  max_attempts = 3
  dead_letter  = "audit.dlq" # a stream

  rule "noise" {
    when    = "key endsWith '.heartbeat'"
    outcome = "drop"
  }
  rule "store" {
    when = "attempt <= 3"
    emit "stream" {
      key = "audit.log"
    }
    outcome = "ack"
  }
  otherwise = "retry"
}
`
