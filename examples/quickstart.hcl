# The quickstart: replay a stream file of orders, route each one with expression rules, and print
# what was routed to stdout as JSON-lines records. No Redis needed:
#
#   go run ./cmd/flowrun run examples/quickstart.hcl
#   go run ./cmd/flowrun test examples/quickstart.hcl

pipeline "orders" {
  source "file" {
    path = "data/orders.jsonl" # relative to this file
    key  = "orders"            # records of other keys are skipped
  }
  concurrency = 1 # one at a time, so the output keeps the file's order

  rule "needs-review" {
    when = "payload.amount > 10000"
    emit "record" {
      key     = "orders.review"
      headers = { reason = "'amount over 10000'" }
    }
    outcome = "ack"
  }

  rule "empty" {
    when    = "payload.amount <= 0"
    outcome = "drop"
  }

  rule "accepted" {
    emit "record" {
      key     = "orders.accepted"
      payload = "{'id': payload.id, 'amount': payload.amount, 'currency': payload.currency}"
      headers = { customer = "headers['customer'] ?? 'unknown'" }
    }
    outcome = "ack"
  }
}

test "large orders go to review" {
  pipeline = "orders"
  message { payload = jsonencode({ id = 1, amount = 20000 }) }
  expect {
    outcome = "ack"
    emits   = [{ kind = "record", key = "orders.review" }]
  }
}

test "empty orders are dropped" {
  pipeline = "orders"
  message { payload = jsonencode({ id = 2, amount = 0 }) }
  expect { outcome = "drop" }
}

test "accepted orders keep id, amount and currency" {
  pipeline = "orders"
  message {
    payload = jsonencode({ id = 3, amount = 12, currency = "EUR", note = "x" })
    headers = { customer = "c-1" }
  }
  expect {
    outcome = "ack"
    emits   = [{ kind = "record", key = "orders.accepted", payload = jsonencode({ id = 3, amount = 12, currency = "EUR" }) }]
  }
}
