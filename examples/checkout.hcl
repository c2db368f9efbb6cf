# A checkout as a workflow that waits: reserve the stock, then wait for the payment service's
# event on the stream "payments" (any order: an event that comes before the run reaches the wait
# is kept for it), then ship. No payment within 30 minutes: the run moves to "expire", which
# fails it, and the stock is released. A waiting run holds nothing in flowrun: it is a record in
# Redis, and its timeout fires in whichever flowrun process is alive.
#
#   redis-server --port 6379 &
#   go run ./cmd/flowrun run examples/checkout.hcl &
#   redis-cli XADD checkouts '*' payload '{"order_id":"c-1","sku":"tea","qty":2}'
#   go run ./cmd/flowrun runs show checkout c-1 examples/checkout.hcl     # waiting
#   redis-cli XADD payments '*' payload '{"order_id":"c-1","status":"paid","amount":12}'
#   go run ./cmd/flowrun runs show checkout c-1 examples/checkout.hcl     # completed
#   go run ./cmd/flowrun test examples/checkout.hcl

redis "checkout" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

workflow "checkout" {
  redis  = "checkout"
  run_id = "payload.order_id"

  start {
    source "stream" {
      stream = "checkouts"
    }
  }

  step "reserve" {
    rule "reserve" {
      output = "{'sku': input.sku, 'qty': input.qty}"
    }
    compensate = "release"
    next       = "await-payment"
  }

  step "await-payment" {
    wait {
      source "stream" {
        stream = "payments" # group "checkout.await-payment"
      }
      correlate = "payload.order_id" # the run the event belongs to
    }
    timeout    = "30m" # also how long an early event is kept for its run
    on_timeout = "expire"
    next       = "ship" # the event's payload is the step's output
  }

  step "ship" {
    rule "unpaid" {
      when = "steps['await-payment'].status != 'paid'"
      fail = "'payment ' + steps['await-payment'].status"
    }
    rule "ship" {
      emit "stream" {
        key     = "shipments"
        payload = "{'order': run.id, 'sku': steps.reserve.sku, 'qty': steps.reserve.qty}"
      }
      output = "{'carrier': 'post', 'paid': steps['await-payment'].amount}"
    }
  }

  step "expire" {
    rule "expire" {
      fail = "'no payment within 30m'"
    }
  }

  step "release" {
    rule "release" {
      output = "'released ' + input.order_id"
    }
  }
}

test "a paid checkout ships" {
  workflow = "checkout"
  input {
    payload = { order_id = "c-1", sku = "tea", qty = 2 }
  }
  event "await-payment" {
    payload = { order_id = "c-1", status = "paid", amount = 12 }
  }
  expect {
    status = "completed"
    path   = ["reserve", "await-payment", "ship"]
    output = { ship = { carrier = "post", paid = 12 } }
  }
}

test "a checkout nobody pays for expires and releases the stock" {
  workflow = "checkout"
  input {
    payload = { order_id = "c-2", sku = "tea", qty = 1 }
  }
  expect {
    status = "failed"
    path   = ["reserve", "release"]
    output = { release = "released c-2" }
  }
}

test "a refused payment releases the stock" {
  workflow = "checkout"
  input {
    payload = { order_id = "c-3", sku = "tea", qty = 1 }
  }
  event "await-payment" {
    payload = { order_id = "c-3", status = "refused" }
  }
  expect {
    status = "failed"
    path   = ["reserve", "await-payment", "release"]
  }
}
