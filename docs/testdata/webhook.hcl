# docs/config-tests.md shows what `flowrun test` prints for this file: examples/webhook.hcl with
# one test that expects the wrong delay, so that it fails (docs/pages_test.go runs it).

pipeline "webhook" {
  source "pipe" {
    key = "payouts"
  }
  out_retry    = "payouts.retry" # retry copies leave on stdout under this key
  max_attempts = 5
  dead_letter  = "payouts.dlq"

  handler "http" {
    url     = env("HOOK_URL", "https://hooks.example.com/payouts")
    timeout = "5s"
    headers = { Authorization = "Bearer ${env("HOOK_TOKEN", "")}" }
  }
}

test "an accepted payout is acked" {
  pipeline = "webhook"
  message { payload = jsonencode({ id = 1, amount = 12 }) }
  mock { status = 200 }
  expect { outcome = "ack" }
}

test "a busy endpoint is tried again when it says" {
  pipeline = "webhook"
  message { payload = jsonencode({ id = 2, amount = 12 }) }
  mock {
    status  = 503
    headers = { "Retry-After" = "7" }
  }
  expect { outcome = "retry_after('10s')" }
}

test "a rate limit without Retry-After backs off" {
  pipeline = "webhook"
  message {
    payload = jsonencode({ id = 3, amount = 12 })
    attempt = 3
  }
  mock { status = 429 }
  expect {
    outcome   = "retry_after" # backoff('1s', '5m'): random, at most 4s on attempt 3
    max_delay = "4s"
  }
}

test "a refused payout is dead-lettered with the status" {
  pipeline = "webhook"
  message { payload = jsonencode({ id = 4 }) }
  mock {
    status = 400
    body   = jsonencode({ error = "no amount" })
  }
  expect {
    outcome = "dead_letter"
    reason  = "http 400 Bad Request"
  }
}
