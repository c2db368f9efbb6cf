# A clock: a record on stdout every 5 seconds and a weekly digest on Monday mornings in Berlin.
# Each tick fires once across every process that shares the redis block (start two and see);
# a file without any redis block takes its ticks within the process (docs/sources/schedule.md).
#
#   go run ./cmd/flowrun run examples/heartbeat.hcl
#   go run ./cmd/flowrun test examples/heartbeat.hcl

redis "clock" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

pipeline "heartbeat" {
  source "schedule" {
    redis = "clock"
    every = "5s"
  }

  rule "beat" {
    emit "record" {
      key     = "heartbeats"
      payload = "{'at': payload.scheduled_at}"
    }
    outcome = "ack"
  }
}

pipeline "digest" {
  source "schedule" {
    redis    = "clock"
    cron     = "0 8 * * 1" # 08:00 every Monday
    timezone = "Europe/Berlin"
  }

  rule "digest" {
    emit "record" {
      key     = "digests"
      payload = "{'week_of': payload.scheduled_at, 'tick': headers['x-scheduled-at']}"
    }
    outcome = "ack"
  }
}

test "each tick writes a heartbeat" {
  pipeline = "heartbeat"
  message {
    payload = jsonencode({ scheduled_at = "2026-12-03T10:00:05Z" })
    headers = { "x-scheduled-at" = "2026-12-03T10:00:05Z" }
  }
  expect {
    outcome = "ack"
    emits   = [{ kind = "record", key = "heartbeats", payload = jsonencode({ at = "2026-12-03T10:00:05Z" }) }]
  }
}

test "the digest names its week" {
  pipeline = "digest"
  message {
    payload = jsonencode({ scheduled_at = "2026-12-07T07:00:00Z" })
    headers = { "x-scheduled-at" = "2026-12-07T07:00:00Z" }
  }
  expect {
    outcome = "ack"
    emits   = [{ kind = "record", key = "digests", payload = jsonencode({ week_of = "2026-12-07T07:00:00Z", tick = "2026-12-07T07:00:00Z" }) }]
  }
}
