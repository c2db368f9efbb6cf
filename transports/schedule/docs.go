package schedule

// What the reference in docs/ says about the schedule kind; `go generate ./docs` renders it next
// to the attributes declared in register.go, and the docs' tests validate the example.

const scheduleDoc = `Starts work on a clock: one message per tick of ` + "`cron`" + ` (five fields, read in
` + "`timezone`" + `) or of ` + "`every`" + ` (an interval), in a pipeline or in a workflow's ` + "`start`" + `. The cron
expression is parsed by [robfig/cron](https://github.com/robfig/cron) (` + "`ParseStandard`" + `); descriptors such as
` + "`@daily`" + ` are refused, since ` + "`every`" + ` and ` + "`timezone`" + ` say the same. ` + "`flowrun validate`" + ` reports a
malformed ` + "`cron`" + ` (or one naming no date that exists, such as 30 February), an unknown ` + "`timezone`" + `, or both or neither of ` + "`cron`" + ` and ` + "`every`" + `, each at its
position. ` + "`flowrun inspect`" + ` (the ` + "`NEXT-DUE`" + ` column, ` + "`next_tick`" + ` in ` + "`--json`" + `) and the status page show
the next tick. A runnable example with tests: ` + "`examples/heartbeat.hcl`" + `.

A tick's message has the ` + "`key`" + ` of the pipeline's name (a workflow's start: the workflow's), the
` + "`id`" + ` and the header ` + "`x-scheduled-at`" + ` of the tick's time (RFC 3339, UTC: ` + "`2026-12-03T02:00:00Z`" + `),
and the payload ` + "`{\"scheduled_at\": \"2026-12-03T02:00:00Z\"}`" + `. A workflow started by a schedule
without ` + "`run_id`" + ` names each run ` + "`<workflow>/<tick>`" + ` (its ` + "`KEY/ID`" + `), so one tick never starts two runs.

## Once across processes

Every process computes the same ticks: ` + "`every`" + ` ticks at whole multiples of the interval from the
Unix epoch, whatever the process's start time. At a tick each process runs one script that
takes the tick with

    SET flowrun:schedule:{<pipeline>}:<tick in Unix ms> <host>:<pid>:<n> NX PX <expiry>

and only the one whose ` + "`SET`" + ` succeeded handles the tick; the same script raises
` + "`flowrun:schedule:{<pipeline>}:last`" + ` (the newest tick taken, in Unix ms) to it. A tick's key
expires after ` + "`catch_up`" + ` plus one hour and one minute, long after any process still tries it;
` + "`last`" + ` never expires (one small key per schedule). Both keys carry the hash tag ` + "`{<pipeline>}`" + `, one
Cluster slot. Ticks fire by the clock of the process that takes them: keep the hosts' clocks in
sync (NTP). The source uses its ` + "`redis`" + ` block, or the only one declared; without any redis block
(a pipeline, not a workflow) the ticks are taken within the process, and a reload continues from
the newest one taken.

A process whose handlers are all busy at a tick, or whose Redis does not answer, still takes the
tick up to one minute late (` + "`catch_up`" + ` longer); after that the tick is skipped, and
the skip is logged.

## catch_up

With ` + "`catch_up = \"6h\"`" + `, a starting process first goes through the ticks after ` + "`last`" + ` (at most 6 hours
back, oldest first) and takes each as above, so ticks missed while no process ran fire once, even
when several processes start together. A schedule that never fired (no ` + "`last`" + `) has missed nothing.
Without ` + "`catch_up`" + ` a start fires only the ticks after it. Without Redis, ` + "`last`" + ` lives in the process:
catch_up then covers a reload, not a restart.

## How each outcome settles

As a Pub/Sub message's: there is nothing to acknowledge.

| outcome | what flowrun does |
|---|---|
| ` + "`ack`, `drop`" + ` | nothing to settle (logged at debug, counted) |
| ` + "`retry`" + ` | a copy held in the process and handed to the handlers again, only when the pipeline declares ` + "`max_attempts`" + ` or ` + "`dead_letter`" + ` |
| ` + "`retry_after(d)`" + ` | the same copy, held in the process until it is due |
| dead letter | ` + "`XADD`" + ` to the ` + "`dead_letter`" + ` stream (which needs a redis block) |

A copy keeps ` + "`x-scheduled-at`" + ` and the tick as its ` + "`id`" + `. ` + "`flowrun dlq list`" + ` and ` + "`purge`" + ` work on the dead
letters; ` + "`redrive`" + ` is refused, since a tick's message has no key to go back to.

## What a crash costs

The process that takes a tick is the only one that handles it. If it dies (` + "`kill -9`" + `, a lost host)
after its ` + "`SET`" + ` succeeded and before the handler finished, **the tick is lost**: its key says it
was taken, so no other process takes it, and ` + "`catch_up`" + ` does not bring it back either (it starts
after ` + "`last`" + `, which the take raised). Its retry copies held in the process are lost the same way.
(A take whose reply was lost, the connection broken, is not lost: the process retries it, and a
key that holds its own name is its own.)
A clean stop (SIGINT, SIGTERM) takes no new tick and lets the handlers in flight finish within
` + "`shutdown_timeout`" + `; copies still held are dropped and logged. Work that must not be lost should
go through a workflow (a schedule ` + "`start`" + `): the run is written to Redis as the tick is handled, and
from then on it survives crashes.
`

const scheduleExample = `redis "main" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

pipeline "nightly-report" {
  source "schedule" {
    cron     = "0 2 * * *" # or every = "30s"
    timezone = "Europe/Berlin"
    catch_up = "6h"
  }

  max_attempts = 3
  dead_letter  = "reports.dlq"

  rule "queue" {
    emit "stream" {
      key = "reports.todo"
    }
    outcome = "ack"
  }
}
`
