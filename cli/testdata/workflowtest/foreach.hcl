# for_each steps (SPEC §16 "Fan-out"): the n-th mock answers the n-th element call, the step's
# output is the list of the elements' outputs in element order.
redis "main" {
  url = "redis://127.0.0.1:1/0"
}

workflow "notify" {
  start {
    source "stream" {
      stream = "orders"
    }
  }
  step "send" {
    for_each     = "input.to"
    payload      = "{'to': item, 'n': index}"
    max_items    = 3
    max_attempts = 2
    handler "http" {
      url = "http://mail.internal/send"
    }
    next = "count"
  }
  step "count" {
    rule "r" {
      output = "len(steps.send)"
    }
  }
}

workflow "go" {
  start {
    source "stream" {
      stream = "go"
    }
  }
  step "each" {
    for_each = "input.xs"
    payload  = "{'x': item, 'i': index}"
    handler "clitest-wf-output" {}
  }
}

test "every element answered in order" {
  workflow = "notify"
  input {
    payload = { to = ["a@x", "b@x"] }
  }
  mock "send" {
    body = jsonencode({ sent = "a" })
  }
  mock "send" {
    status = 503 # a retry of element 1: the third mock answers it
  }
  mock "send" {
    body = jsonencode({ sent = "b" })
  }
  expect {
    status = "completed"
    path   = ["send", "count"]
    output = { send = [{ sent = "a" }, { sent = "b" }], count = 2 }
  }
}

test "an empty list finishes the step with []" {
  workflow = "notify"
  input {
    payload = { to = [] }
  }
  expect {
    status = "completed"
    output = { send = [], count = 0 }
  }
}

test "too many elements fail the run before any runs" {
  workflow = "notify"
  input {
    payload = { to = ["a", "b", "c", "d"] }
  }
  expect {
    status = "failed"
    path   = []
  }
}

test "an element that reaches the dead letter fails the run" {
  workflow = "notify"
  input {
    payload = { to = ["a", "b"] }
  }
  mock "send" {
    body = "ok"
  }
  mock "send" {
    status = 400
  }
  expect {
    status = "failed"
    path   = []
  }
}

test "each element's key and payload" {
  workflow = "go"
  input {
    payload = { xs = ["p", "q"] }
  }
  expect {
    status = "completed"
    output = {
      each = [
        { payload = { x = "p", i = 0 }, key = "go/test/each/1/0", run = "test", steps = 0 },
        { payload = { x = "q", i = 1 }, key = "go/test/each/1/1", run = "test", steps = 0 },
      ]
    }
  }
}

test "this one fails on purpose: the list's order is the elements'" {
  workflow = "go"
  input {
    payload = { xs = [1, 2] }
  }
  expect {
    output = { each = [{ payload = { x = 2, i = 1 } }] }
  }
}
