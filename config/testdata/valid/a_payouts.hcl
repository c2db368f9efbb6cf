redis "main" {
  url      = env("FLOWRUN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
  username = "flowrun"
  password = env("FLOWRUN_TEST_PASSWORD", "")
  tls {
    ca_file     = "certs/ca.pem"
    server_name = "redis"
  }
}

pipeline "payouts" {
  source "claiming" {
    redis    = "main"
    stream   = "payouts"
    group    = "payouts"
    consumer = "worker-1"
    min_idle = "30s"
    start    = "0"
    batch    = 100
    block    = "1s"
  }

  concurrency      = 16
  max_attempts     = 3
  dead_letter      = "payouts.dlq"
  delayed_retry    = "runtime"
  shutdown_timeout = "30s"

  rule "too-large" {
    when    = "payload.amount > 10000"
    outcome = "drop"
  }
  rule "gateway-down" {
    when    = "headers['gateway'] == 'down'"
    outcome = "retry_after('5s')"
  }
  rule "ok" {
    emit "stream" {
      key     = "payouts.done"
      payload = "{'id': payload.id, 'paid': true}"
      headers = { source = "'flowrun'", attempt = "attempt" }
    }
    outcome = "ack"
  }
}

test "large payouts are dropped" {
  pipeline = "payouts"
  message { payload = jsonencode({ id = 1, amount = 20000 }) }
  expect { outcome = "drop" }
}

test "gateway down" {
  pipeline = "payouts"
  message {
    payload = file("payload.json")
    headers = { gateway = "down" }
    key     = "other"
    attempt = 2
  }
  expect { outcome = "retry_after('5s')" }
}

test "ok emits" {
  pipeline = "payouts"
  message { payload = jsonencode({ id = 7, amount = 1 }) }
  expect {
    outcome = "ack"
    emits = [
      { kind = "stream", key = "payouts.done", payload = { id = 7, paid = true } },
      { kind = "record", key = "audit", payload = "raw text" },
    ]
  }
}

# Close to examples/payouts.hcl, but with the attributes spelled out (tls, group, start, file(),
# a record emit) so that TestLoadValid checks each decoded; the example stays short for readers.
