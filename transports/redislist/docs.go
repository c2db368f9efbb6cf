package redislist

// What the reference in docs/ says about the list kind; `go generate ./docs` renders it next to
// the attributes declared in register.go, and the docs' tests validate the example.

const listDoc = `With ` + "`reliable = true`" + ` (the default) each element is moved atomically to this consumer's processing
list as it is read (` + "`BLMOVE key processing RIGHT LEFT`" + `) and removed from there once its outcome is
settled (` + "`LREM`" + `). At start, elements a crash left in the processing list go back to the end of ` + "`key`" + `
that is read next, in their order, before anything new is read; after a reconnect the processing
list is swept the same way, so nothing is stranded. With ` + "`reliable = false`" + ` elements are popped with
` + "`BRPOP`" + `: at most once, nothing to settle.

An element that is a JSON object with ` + "`payload`" + ` (and optionally ` + "`headers`" + `, an object of strings) is an
envelope; anything else is a bare payload without headers. The message's ` + "`key`" + ` is the list; it has no
` + "`id`" + `. ` + "`attempt`" + ` is ` + "`x-retry-count`" + ` + 1. Dead letters are a list (` + "`dead_letter`" + `).

## How each outcome settles

| outcome | reliable list | ` + "`reliable = false`" + ` |
|---|---|---|
| ` + "`ack`, `drop`" + ` | ` + "`LREM`" + ` from the processing list | nothing to settle |
| ` + "`retry`" + ` | ` + "`LPUSH`" + ` a copy (an envelope with ` + "`x-retry-count`" + ` one higher) to ` + "`key`" + `, then ` + "`LREM`" + ` the original, in one script | a copy, only when the pipeline declares ` + "`max_attempts`" + ` or ` + "`dead_letter`" + ` |
| ` + "`retry_after(d)`" + ` | a copy held in the process, pushed to ` + "`key`" + ` when due | the same |
| dead letter | ` + "`LPUSH`" + ` to the ` + "`dead_letter`" + ` list, then ` + "`LREM`" + ` | ` + "`LPUSH`" + ` to the ` + "`dead_letter`" + ` list |
`

const listExample = `redis "main" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

pipeline "jobs" {
  source "list" {
    key        = "jobs"
    reliable   = true                       # BLMOVE to a processing list
    consumer   = "worker-1"                 # default: the host name
    processing = "jobs:processing:worker-1" # the default for this consumer
    batch      = 10
    block      = "2s"
  }

  max_attempts = 3
  dead_letter  = "jobs.dlq"

  rule "retry-later" {
    when    = "attempt < 3 && headers['state'] == 'busy'"
    outcome = "retry_after('30s')"
  }
  rule "done" {
    emit "list" {
      key     = "jobs.done"
      headers = { worker = "'worker-1'" }
    }
    outcome = "ack"
  }
}
`
