pipeline "orders" {
  source "file" {
    path = "orders.jsonl"
  }
  concurrency_key {
    key = "payload.customr + 1"
  }
  throttle {
    limit  = 0
    period = "soon"
    key    = "headers["
  }
  dedupe {
    key    = "payload.id"
    window = "-1h"
  }
  dedupe {
    key    = "payload.id"
    window = "1h"
  }
  rule "ok" {
    outcome = "ack"
  }
}

pipeline "more" {
  source "file" {
    path = "more.jsonl"
  }
  concurrency_key {
    limit = 2
    lease = "0s"
    keys  = "x"
  }
  throttle {
    key = "headers['tenant'] == 1 ? 'a' : 'b'"
  }
  dedupe {}
  rule "ok" {
    outcome = "ack"
  }
}

pipeline "plain" {
  source "file" {
    path = "plain.jsonl"
  }
  throttle {
    limit  = 5
    period = "1s"
  }
  rule "ok" {
    outcome = "ack"
  }
}

test "which key" {
  pipeline = "orders"
  expect { key = "x" }
}

test "no such block" {
  pipeline = "plain"
  expect {
    outcome      = "ack"
    dedupe_key   = "x"
    throttle_key = "y"
  }
}
