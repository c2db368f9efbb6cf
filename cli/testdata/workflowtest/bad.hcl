redis "main" {
  url = "redis://127.0.0.1:1/0"
}

workflow "order" {
  start {
    source "stream" {
      stream = "orders"
    }
  }
  step "reserve" {
    handler "http" {
      url = "http://127.0.0.1:1/reserve"
    }
    next = "check"
  }
  step "check" {
    rule "ok" {
      output = "1"
    }
  }
}

test "unknown workflow" {
  workflow = "ordr"
  expect {
    status = "completed"
  }
}

test "unknown steps" {
  workflow = "order"
  mock "reserv" {}
  event "check" {
    payload = { id = 1 }
  }
  event "nope" {}
  expect {
    status = "complete"
    path   = ["reserve", "chek"]
    output = { nope = 1 }
  }
}

test "a mock of rules" {
  workflow = "order"
  mock "check" {
    output = 1
  }
  mock "reserve" {
    outcome = "later"
  }
  mock "reserve" {
    outcome = "retry_after"
  }
  mock "reserve" {
    status = "x"
  }
}
