redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

workflow "waits" {
  start {
    source "stream" {
      stream = "orders"
    }
  }

  step "no-correlate" {
    wait {
      source "stream" {
        stream = "payments"
      }
    }
    next = "with-rules"
  }

  step "with-rules" {
    wait {
      source "stream" {
        stream = "payments"
      }
      correlate = "payload.order_id"
    }
    rule "paid" {
      output = "payload"
    }
    payload = "input"
    next    = "with-handler"
  }

  step "with-handler" {
    wait {
      source "stream" {
        stream = "payments"
      }
      correlate = "payload.order_id"
    }
    handler "exec" {
      command = ["true"]
    }
    next = "no-source"
  }

  step "no-source" {
    wait {
      correlate = "payload.order_id"
    }
    next = "twice"
  }

  step "twice" {
    wait {
      source "stream" {
        stream = "payments"
      }
      correlate = "payload.order_id +"
    }
    wait {
      source "stream" {
        stream = "refunds"
      }
      correlate = "payload.order_id"
    }
    compensate = "no-correlate"
  }
}
