# Payouts from a Redis stream shared by many workers: idle entries of crashed workers are
# claimed back, a failing gateway is retried later, and the third failure goes to a dead letter.
#
#   REDIS_URL=redis://127.0.0.1:6379/0 go run ./cmd/flowrun run examples/payouts.hcl

redis "main" {
  url      = env("REDIS_URL", "redis://127.0.0.1:6379/0")
  password = env("REDIS_PASSWORD", "")
}

pipeline "payouts" {
  source "claiming" {
    redis    = "main"
    stream   = "payouts"
    min_idle = "30s"
  }

  concurrency      = 16
  max_attempts     = 3
  dead_letter      = "payouts.dlq"
  shutdown_timeout = "30s"

  rule "too-large" {
    when    = "payload.amount > 10000"
    outcome = "drop"
  }

  rule "gateway-down" {
    when    = "headers['gateway'] == 'down'"
    outcome = "retry_after(backoff('1s', '1m'))"
  }

  rule "ok" {
    emit "stream" {
      key     = "payouts.done"
      payload = "{'id': payload.id, 'paid': true}"
      headers = { source = "'flowrun'" }
    }
    outcome = "ack"
  }
}

test "large payouts are dropped" {
  pipeline = "payouts"
  message { payload = jsonencode({ id = 1, amount = 20000 }) }
  expect { outcome = "drop" }
}

test "paid payouts are announced" {
  pipeline = "payouts"
  message { payload = jsonencode({ id = 7, amount = 12 }) }
  expect {
    outcome = "ack"
    emits   = [{ kind = "stream", key = "payouts.done", payload = jsonencode({ id = 7, paid = true }) }]
  }
}

test "a payout is retried later while the gateway is down" {
  pipeline = "payouts"
  message {
    payload = jsonencode({ id = 2, amount = 12 })
    headers = { gateway = "down" }
    attempt = 2
  }
  expect {
    outcome   = "retry_after" # backoff('1s', '1m'): random, at most 2s on attempt 2
    max_delay = "2s"
  }
}
