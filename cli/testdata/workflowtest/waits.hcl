redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

workflow "pay" {
  start {
    source "stream" {
      stream = "orders"
    }
  }

  step "await" {
    wait {
      source "stream" {
        stream = "payments"
      }
      correlate = "payload.order"
    }
    timeout    = "1h"
    on_timeout = "late"
    next       = "check"
  }

  step "check" {
    rule "again" {
      when = "steps.await.status == 'pending'"
      next = "await"
    }
    rule "done" {
      output = "steps.await.status"
    }
  }

  step "late" {
    rule "late" {
      output = "'late'"
    }
  }
}

workflow "forever" {
  start {
    source "stream" {
      stream = "orders2"
    }
  }

  step "await" {
    wait {
      source "stream" {
        stream = "payments2"
      }
      correlate = "payload.order"
    }
  }
}

test "the event finishes the wait" {
  workflow = "pay"
  event "await" {
    payload = { order = "test", status = "paid" }
  }
  expect {
    status = "completed"
    path   = ["await", "check"]
    output = { await = { order = "test", status = "paid" }, check = "paid" }
  }
}

test "each visit of a wait takes the next event" {
  workflow = "pay"
  event "await" {
    payload = { status = "pending" }
  }
  event "await" {
    payload = { status = "paid at last" }
  }
  expect {
    status = "completed"
    path   = ["await", "check", "await", "check"]
    output = { await = { status = "paid at last" }, check = "paid at last" }
  }
}

test "no event: the timeout moves the run on" {
  workflow = "pay"
  expect {
    status = "completed"
    path   = ["late"]
  }
}

test "no event and no timeout: the run is left waiting" {
  workflow = "forever"
  expect {
    status = "completed"
  }
}
