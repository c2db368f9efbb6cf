# Per-key flow control (SPEC §13), shared by every flowrun process that runs this pipeline
# against the same Redis: one customer's charges run one at a time, each tenant starts at most
# 50 charges a second, and an order charged once is never charged again within a day.
#
#   REDIS_URL=redis://127.0.0.1:6379/0 go run ./cmd/flowrun run examples/flow-control.hcl
#
# Ordering: within one process, a customer's charges run in the order they were read
# (limit = 1). Across processes Redis gives no order: two processes may read a customer's
# charges in either order, and each still waits for the other's to finish.

redis "flow" {
  url      = env("REDIS_URL", "redis://127.0.0.1:6379/0")
  password = env("REDIS_PASSWORD", "")
}

pipeline "billing" {
  source "claiming" {
    redis    = "flow"
    stream   = "orders"
    min_idle = "30s"
  }

  concurrency  = 32
  max_attempts = 5
  dead_letter  = "orders.dlq"

  concurrency_key {
    key   = "payload.customer"
    limit = 1
  }

  throttle {
    limit  = 50
    period = "1s"
    key    = "headers['tenant'] ?? 'default'"
  }

  dedupe {
    key    = "payload.order_id"
    window = "24h"
  }

  rule "gateway-down" {
    when    = "headers['gateway'] == 'down'"
    outcome = "retry_after(backoff('1s', '1m'))"
  }

  rule "charge" {
    emit "stream" {
      key     = "orders.done"
      payload = "{'order_id': payload.order_id, 'charged': true}"
    }
    outcome = "ack"
  }
}

test "charges of one customer share a key" {
  pipeline = "billing"
  message {
    payload = jsonencode({ customer = "c-42", order_id = 1001 })
    headers = { tenant = "acme" }
  }
  expect {
    outcome         = "ack"
    concurrency_key = "c-42"
    throttle_key    = "acme"
    dedupe_key      = "1001"
  }
}

test "a charge without a tenant counts against the default budget" {
  pipeline = "billing"
  message { payload = jsonencode({ customer = "c-7", order_id = 7 }) }
  expect { throttle_key = "default" }
}
