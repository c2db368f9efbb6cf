package redisstream

// What the reference in docs/ says about the stream kinds; `go generate ./docs` renders it next
// to the attributes declared in register.go, and the docs' tests validate each example.

var kindSummary = map[string]string{
	KindStream:   "a Redis stream read by a consumer group",
	KindClaiming: "a Redis stream whose idle pending entries any worker claims (`XPENDING`, `XCLAIM`)",
	KindReclaim:  "a Redis stream whose idle pending entries any worker claims with `XAUTOCLAIM`",
}

const settleStream = `| outcome | what flowrun does |
|---|---|
| ` + "`ack`, `drop`" + ` | ` + "`XACK`" + ` |
| ` + "`retry`" + ` | ` + "`XADD`" + ` a copy (with ` + "`x-retry-count`" + ` one higher) to the same stream, then ` + "`XACK`" + ` the original, in one script |
| ` + "`retry_after(d)`" + ` | by ` + "`delayed_retry`" + `: ` + "`\"runtime\"`" + ` acknowledges the original and holds the copy in the process until it is due; ` + "`\"durable_zset\"`" + ` ` + "`ZADD`" + `s it to ` + "`delay_key`" + ` and acknowledges the original |
| dead letter | ` + "`XADD`" + ` to the ` + "`dead_letter`" + ` stream, then ` + "`XACK`" + ` |

## What a crash costs

- Any outcome not yet settled: nothing. The entry stays pending and this consumer re-reads it at
  its next start.
- ` + "`retry_after(d)`" + ` with ` + "`delayed_retry = \"runtime\"`" + ` (the default): the copy lives only in the process
  once its original is acknowledged, so a crash (` + "`kill -9`" + `, a lost machine) before it is due **loses
  it**; a clean stop (SIGINT, SIGTERM) writes every held copy at once, early rather than lost.
- ` + "`retry_after(d)`" + ` with ` + "`delayed_retry = \"durable_zset\"`" + `: nothing. The copy is in ` + "`delay_key`" + ` before its
  original is acknowledged, in one script, and comes back when due, after a restart too.
`

const settleClaiming = `| outcome | what flowrun does |
|---|---|
| ` + "`ack`, `drop`" + ` | ` + "`XACK`" + ` |
| ` + "`retry`" + ` | nothing: the entry stays pending, and a claiming read takes it back once it has been idle ` + "`min_idle`" + `, same id, delivery count one higher |
| ` + "`retry_after(d)`" + ` | the entry stays pending; a delay shorter than ` + "`min_idle`" + ` waits ` + "`min_idle`" + `, a longer one is honoured while this worker lives (it keeps the entry from looking idle until ` + "`d − min_idle`" + ` has passed) |
| dead letter | ` + "`XADD`" + ` to the ` + "`dead_letter`" + ` stream, then ` + "`XACK`" + ` |

## What a crash costs

Nothing. A delivery not yet settled, a ` + "`retry`" + ` and a ` + "`retry_after(d)`" + ` all leave the entry pending in
Redis (there is no runtime copy and no ` + "`delayed_retry`" + ` mode here): after ` + "`min_idle`" + ` any worker of the
group claims it again, which after a crash can be before ` + "`d`" + ` is up.
`

const streamMessages = `An entry's field ` + "`payload`" + ` is the message's payload and every other field is a header, so an
entry written by any producer (` + "`XADD orders * id 7 amount 12`" + `) is a message with those fields as
headers and an empty payload. The message's ` + "`key`" + ` is the stream and its ` + "`id`" + ` the entry id. Dead letters
are a stream (` + "`dead_letter`" + `), read and redriven with ` + "`flowrun dlq`" + `.`

const claimingIdle = `While a delivery waits in a batch or runs in a handler, flowrun keeps it from looking idle (one Lua
script per batch, on a timer at a third of ` + "`min_idle`" + `, runs ` + "`XCLAIM … JUSTID`" + ` for the ids this consumer
still owns and read or claimed more than half a tick ago), so a slow handler is never run twice at once by a
second worker. ` + "`attempt`" + ` is Redis's
delivery count; deliveries carry ` + "`x-delivery-count`" + ` and ` + "`x-idle-ms`" + ` (see the
[headers reference](../reference/headers.md)).`

var kindDoc = map[string]string{
	KindStream: `Reads a stream with a consumer group: ` + "`XREADGROUP`" + `, first this consumer's own pending entries
(id ` + "`0`" + `, left by a crash or a lost reply), then new ones (` + "`>`" + `). Any number of processes may share the
group; Redis spreads the entries. ` + "`attempt`" + ` is ` + "`x-retry-count`" + ` + 1.

` + streamMessages + `

## How each outcome settles

` + settleStream,

	KindClaiming: `Reads new entries with ` + "`XREADGROUP >`" + ` and takes over entries that have sat pending for ` + "`min_idle`" + ` in any
consumer of the group (a crashed or stuck worker): ` + "`XPENDING … IDLE min_idle`" + `, then ` + "`XCLAIM`" + `. A retry is
the same entry delivered again, never a copy.

` + claimingIdle + `

` + streamMessages + `

## How each outcome settles

` + settleClaiming,

	KindReclaim: `As ` + "`claiming`" + `, but takes over idle pending entries with ` + "`XAUTOCLAIM min_idle`" + ` and then one
` + "`XPENDING`" + ` to learn their delivery counts. ` + "`x-idle-ms`" + ` is ` + "`min_idle`" + `, a lower bound, since ` + "`XAUTOCLAIM`" + `
resets the idle time before it can be read.

` + claimingIdle + `

` + streamMessages + `

## How each outcome settles

` + settleClaiming,
}

var kindExample = map[string]string{
	KindStream: `redis "main" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

pipeline "orders" {
  source "stream" {
    stream       = "orders"
    group        = "orders"   # default: the pipeline's name
    consumer     = "worker-1" # default: the host name
    start        = "0"        # or "$": only new entries
    batch        = 100
    block        = "1s"
    trim         = "acked" # trim what every group has acknowledged
    consumer_ttl = "24h"   # delete consumers idle this long with nothing pending
  }

  concurrency   = 8
  max_attempts  = 5
  dead_letter   = "orders.dlq"
  delayed_retry = "durable_zset" # retry_after copies survive a crash
  delay_key     = "orders:delayed"

  rule "invalid" {
    when    = "payload.amount == nil"
    outcome = "drop"
  }
  rule "busy" {
    when    = "headers['gateway'] == 'busy'"
    outcome = "retry_after(backoff('1s', '5m'))"
  }
  rule "ok" {
    emit "stream" {
      key     = "orders.done"
      payload = "{'id': payload.id, 'paid': true}"
    }
    outcome = "ack"
  }
}
`,
	KindClaiming: `redis "main" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

pipeline "payouts" {
  source "claiming" {
    stream   = "payouts"
    min_idle = "30s" # take over entries pending this long in any consumer
    batch    = 50
  }

  concurrency  = 16
  max_attempts = 3
  dead_letter  = "payouts.dlq"

  rule "gateway-down" {
    when    = "headers['gateway'] == 'down'"
    outcome = "retry_after('5s')"
  }
  rule "ok" {
    outcome = "ack"
  }
}
`,
	KindReclaim: `redis "main" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

pipeline "emails" {
  source "reclaim" {
    stream   = "emails"
    group    = "mailer"
    min_idle = "1m"
  }

  max_attempts = 4
  dead_letter  = "emails.dlq"

  handler "http" {
    url     = "https://mail.example.com/send"
    timeout = "10s"
  }
}
`,
}
