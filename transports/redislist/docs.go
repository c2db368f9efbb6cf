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
| ` + "`retry_after(d)`" + ` | by ` + "`delayed_retry`" + `: ` + "`\"runtime\"`" + ` (the default) ` + "`LREM`" + `s the original and holds the copy in the process, pushed to ` + "`key`" + ` when due; ` + "`\"durable_zset\"`" + ` ` + "`ZADD`" + `s the copy to ` + "`delay_key`" + ` and ` + "`LREM`" + `s the original, in one script | a copy held in the process, pushed to ` + "`key`" + ` when due |
| dead letter | ` + "`LPUSH`" + ` to the ` + "`dead_letter`" + ` list, then ` + "`LREM`" + ` | ` + "`LPUSH`" + ` to the ` + "`dead_letter`" + ` list |

## Durable delays

SPEC §5 names ` + "`delayed_retry = \"durable_zset\"`" + ` for stream sources; flowrun extends it to reliable
lists. The copy (an envelope with ` + "`x-retry-count`" + ` one higher) is added to the sorted set ` + "`delay_key`" + `
(default ` + "`\"<key>:delayed\"`" + `), scored by its due time in wall-clock milliseconds, and the element is removed
from the processing list, in one Lua script. A read first moves up to 128 due copies back onto
` + "`key`" + ` (` + "`ZRANGEBYSCORE`" + `, ` + "`LPUSH`" + `, ` + "`ZREM`" + `), in another, so two workers never move one copy twice, whenever a copy this
process knows of is due and at least once a second (for the copies other processes delayed); a
read blocks no longer than until the next copy this process knows of is due, and a delay is
honoured to within one ` + "`block`" + `. The workers that share a list should have agreeing clocks. In a
Redis Cluster ` + "`key`" + `, ` + "`processing`" + ` and ` + "`delay_key`" + ` must hash to one slot (use a ` + "`{hash tag}`" + `);
` + "`flowrun validate`" + ` says so with the attribute's position. ` + "`flowrun inspect`" + ` shows the queue's size and
next due time, ` + "`flowrun graph`" + ` the delay key. A simple list (` + "`reliable = false`" + `) has no processing
list to move the element out of atomically, and refuses ` + "`durable_zset`" + `.

## What a crash costs

- Reliable list, any outcome not yet settled: nothing. The element is still in the processing list
  and goes back to ` + "`key`" + ` at the next start with this consumer name.
- Reliable list, ` + "`retry_after(d)`" + ` with ` + "`delayed_retry = \"runtime\"`" + ` (the default): the copy lives only in
  the process once its original is removed, so a crash (` + "`kill -9`" + `, a lost machine) before it is due
  **loses it**; a clean stop (SIGINT, SIGTERM) pushes every held copy at once, early rather than lost.
- Reliable list, ` + "`retry_after(d)`" + ` with ` + "`delayed_retry = \"durable_zset\"`" + `: nothing. At every moment the
  element is in the processing list or its copy in ` + "`delay_key`" + `, and it is delivered once due, after a
  restart too.
- Simple list (` + "`reliable = false`" + `): what was popped and not yet handled, and every held
  ` + "`retry_after`" + ` copy, is lost; a clean stop puts unhandled elements back and pushes held copies.
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
