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
