# test blocks name a pipeline with rules and expect an outcome.
pipeline "payouts" {
  source "pipe" {}
  out_retry = "again"
  rule "r" {
    outcome = "ack"
  }
}

pipeline "hooked" {
  source "pipe" {}
  out_retry = "again"
  handler "log" {}
}

test "typo" {
  pipeline = "payuots"
  expect { outcome = "drop" }
}

test "handler" {
  pipeline = "hooked"
  expect { outcome = "ack" }
}

test "bad outcome" {
  pipeline = "payouts"
  message {
    attempt = 0
    headers = { a = ["b"] }
  }
  expect { outcome = "accept" }
}

test "bad delay" {
  pipeline = "payouts"
  expect { outcome = "retry_after('5 seconds')" }
}

test "no expect" {
  pipeline = "payouts"
  message { payload = "x" }
}

test "bad emits" {
  pipeline = "payouts"
  expect {
    outcome = "ack"
    emits = [
      { kind = "stream", key = "k", paylod = "x" },
      { kind = "queue", key = "k" },
      { key = "k" },
      "stream",
    ]
  }
}

test "typo" {
  expect {
    outcom = "ack"
  }
}
