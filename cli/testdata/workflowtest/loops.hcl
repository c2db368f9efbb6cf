# A run that never ends fails its test instead of hanging it.
redis "main" {
  url = "redis://127.0.0.1:1/0"
}

workflow "loops" {
  start {
    source "stream" {
      stream = "loops"
    }
  }
  step "again" {
    rule "always" {
      outcome = "retry"
    }
  }
}

test "a step that always retries" {
  workflow = "loops"
  expect {
    status = "completed"
  }
}
