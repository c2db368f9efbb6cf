# An order as a workflow: reserve the stock, charge the card (bin/charge, through the exec
# handler), ship; a failure after a step finished undoes what was done, in reverse order. Every
# run lives in Redis under flowrun:{order}:, so a crash anywhere leaves it where it was.
#
#   redis-server --port 6379 &
#   go run ./cmd/flowrun run examples/order.hcl &
#   redis-cli XADD orders '*' payload '{"order_id":"o-1","sku":"tea","qty":2,"amount":12,"country":"FR"}'
#   go run ./cmd/flowrun runs show order o-1 examples/order.hcl
#   go run ./cmd/flowrun test examples/order.hcl

redis "orders" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

workflow "order" {
  redis      = "orders"
  run_id     = "payload.order_id" # one run per order: a second message for it starts nothing
  on_failure = "compensate"
  retention  = "168h"

  start {
    source "stream" {
      stream = "orders"
    }
  }

  step "reserve" {
    rule "reserve" {
      output = "{'sku': input.sku, 'qty': input.qty, 'reservation': 'r-' + run.id}"
    }
    compensate = "release"
    next       = "charge"
  }

  step "charge" {
    handler "exec" {
      command = ["./charge"] # prints {"paid":true,...}: the step's output
      dir     = "bin"
      timeout = "10s"
    }
    payload      = "{'id': run.id, 'amount': input.amount}"
    max_attempts = 3     # exit 75 retries; the third failure fails the run
    timeout      = "10m" # the step, retries included
    compensate   = "refund"
    next         = "ship"
  }

  step "ship" {
    delay = "1s" # entering the step waits, durably
    rule "no-carrier" {
      when = "input.country not in ['FR', 'DE', 'NL']"
      fail = "'no carrier ships to ' + input.country"
    }
    rule "ship" {
      emit "stream" {
        key     = "shipments"
        payload = "{'order': run.id, 'sku': steps.reserve.sku, 'qty': steps.reserve.qty}"
      }
      output = "{'carrier': 'post', 'charge': steps.charge.charge.id}"
    }
  }

  step "refund" {
    rule "refund" {
      emit "stream" {
        key     = "refunds"
        payload = "{'order': run.id, 'amount': input.amount}"
      }
      output = "'refunded'"
    }
  }

  step "release" {
    rule "release" {
      output = "'released ' + steps.reserve.reservation"
    }
  }
}

test "an order is reserved, charged and shipped" {
  workflow = "order"
  input {
    payload = { order_id = "o-1", sku = "tea", qty = 2, amount = 12, country = "FR" }
  }
  mock "charge" {
    stdout = jsonencode({ paid = true, charge = { id = "o-1", amount = 12 } })
  }
  expect {
    status = "completed"
    path   = ["reserve", "charge", "ship"]
    output = { ship = { carrier = "post", charge = "o-1" } }
  }
}

test "a declined card releases the stock" {
  workflow = "order"
  input {
    payload = { order_id = "o-2", sku = "tea", qty = 1, amount = -5, country = "FR" }
  }
  mock "charge" {
    exit   = 2
    stderr = "card declined"
  }
  expect {
    status = "failed"
    path   = ["reserve", "release"]
  }
}

test "an order no carrier takes is refunded, then released" {
  workflow = "order"
  input {
    payload = { order_id = "o-3", sku = "tea", qty = 1, amount = 12, country = "AQ" }
  }
  mock "charge" {
    stdout = jsonencode({ paid = true, charge = { id = "o-3", amount = 12 } })
  }
  expect {
    status = "failed"
    path   = ["reserve", "charge", "refund", "release"]
  }
}

test "a busy gateway is tried again" {
  workflow = "order"
  input {
    payload = { order_id = "o-4", sku = "tea", qty = 1, amount = 12, country = "DE" }
  }
  mock "charge" {
    exit   = 75
    stderr = "gateway busy"
  }
  mock "charge" {
    stdout = jsonencode({ paid = true, charge = { id = "o-4", amount = 12 } })
  }
  expect {
    status = "completed"
    path   = ["reserve", "charge", "ship"]
  }
}
