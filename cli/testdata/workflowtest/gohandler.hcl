# A workflow whose step is a Go handler (registered by the cli tests): run as compiled.
redis "main" {
  url = "redis://127.0.0.1:1/0"
}

workflow "go" {
  start {
    source "stream" {
      stream = "go"
    }
  }
  step "first" {
    handler "clitest-wf-output" {}
    payload = "{'n': input.n + 1}"
    next    = "second"
  }
  step "second" {
    handler "clitest-wf-output" {}
  }
}

test "a Go handler's output" {
  workflow = "go"
  input {
    payload = { n = 1 }
  }
  expect {
    status = "completed"
    path   = ["first", "second"]
    output = {
      first  = { payload = { n = 2 }, key = "go/test/first/1", run = "test", steps = 0 }
      second = { payload = { n = 1 }, key = "go/test/second/2", run = "test", steps = 1 }
    }
  }
}

test "a Go handler's step mocked by output and outcome" {
  workflow = "go"
  input {
    payload = { n = 1 }
  }
  mock "first" {
    output = "mocked"
  }
  mock "second" {
    outcome = "dead_letter"
  }
  expect {
    status = "failed"
    path   = ["first"]
    output = { first = "mocked" }
  }
}
