# Tests of a workflow (SPEC §16 "Tests"), run offline by `flowrun test`: nothing here connects.
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
    payload      = "{'sku': input.sku}"
    max_attempts = 3
    compensate   = "release"
    next         = "charge"
  }

  step "charge" {
    handler "exec" {
      command = ["./no-such-program"]
    }
    compensate = "refund"
    timeout    = "10m"
    on_timeout = "refund"
    next       = "check"
  }

  step "check" {
    rule "declined" {
      when = "steps.charge.status == 'declined'"
      fail = "'declined: ' + input.sku"
    }
    rule "manual" {
      when = "steps.charge.status == 'review'"
      next = "review"
    }
    rule "paid" {
      output = "steps.charge.id"
    }
  }

  step "review" {
    rule "ok" {
      output = "'reviewed ' + run.id"
    }
  }

  step "release" {
    handler "http" {
      url = "http://127.0.0.1:1/release"
    }
  }

  step "refund" {
    delay = "1m"
    handler "exec" {
      command = ["./no-such-program"]
    }
  }
}

test "completes" {
  workflow = "order"
  input {
    payload = { sku = "a-1" }
  }
  mock "reserve" {
    output = { id = "r1" }
  }
  mock "charge" {
    output = { status = "paid", id = "c1" }
  }
  expect {
    status = "completed"
    path   = ["reserve", "charge", "check"]
    output = { reserve = { id = "r1" }, check = "c1" }
  }
}

test "a rule chooses the way" {
  workflow = "order"
  input {
    payload = { sku = "a-1" }
  }
  mock "reserve" {}
  mock "charge" {
    output = { status = "review" }
  }
  expect {
    status = "completed"
    path   = ["reserve", "charge", "check", "review"]
    output = { review = "reviewed test" }
  }
}

test "retries answer from the next mocks" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {
    outcome = "retry"
  }
  mock "reserve" {
    status = 503
  }
  mock "reserve" {
    output = "third time"
  }
  mock "charge" {
    output = { status = "paid", id = "c2" }
  }
  expect {
    status = "completed"
    output = { reserve = "third time" }
  }
}

test "the cap fails the run" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {
    outcome = "retry"
  }
  mock "reserve" {
    outcome = "retry_after('1s')"
  }
  mock "reserve" {
    status = 503
  }
  expect {
    status = "failed"
    path   = []
  }
}

test "a permanent error fails the run at once" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {
    status = 400
  }
  expect {
    status = "failed"
    path   = []
  }
}

test "a rule's fail compensates in reverse" {
  workflow = "order"
  input {
    payload = { sku = "a-1" }
  }
  mock "reserve" {}
  mock "charge" {
    output = { status = "declined" }
  }
  mock "refund" {}
  mock "release" {}
  expect {
    status = "failed"
    path   = ["reserve", "charge", "refund", "release"]
  }
}

test "a compensation that fails" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {}
  mock "charge" {
    output = { status = "declined" }
  }
  mock "refund" {
    outcome = "dead_letter"
  }
  expect {
    status = "compensation_failed"
    path   = ["reserve", "charge"]
  }
}

test "a drop cancels, compensating" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {}
  mock "charge" {
    outcome = "drop"
  }
  mock "release" {}
  expect {
    status = "cancelled"
    path   = ["reserve", "release"]
  }
}

test "a step's timeout moves on" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {}
  mock "charge" {
    outcome = "retry_after('11m')"
  }
  mock "refund" {
    output = "refunded"
  }
  expect {
    status = "completed"
    path   = ["reserve", "refund"]
    output = { refund = "refunded" }
  }
}

test "handlers' own outputs: the response body, stdout" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {
    status = 200
    body   = jsonencode({ id = "h1" })
  }
  mock "charge" {
    exit   = 0
    stdout = jsonencode({ status = "paid", id = "e1" })
  }
  expect {
    status = "completed"
    output = { reserve = { id = "h1" }, charge = { status = "paid", id = "e1" }, check = "e1" }
  }
}

test "wrong expectations" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {
    output = { id = "r1" }
  }
  mock "charge" {
    output = { status = "paid", id = "c1" }
  }
  expect {
    status = "failed"
    path   = ["reserve", "check"]
    output = { reserve = { id = "r2" }, review = "x" }
  }
}

test "a call without its mock" {
  workflow = "order"
  input {
    payload = { sku = "b-2" }
  }
  mock "reserve" {}
  expect {
    status = "completed"
  }
}

test "no input" {
  workflow = "order"
  mock "reserve" {}
  expect {
    status = "failed"
  }
}
