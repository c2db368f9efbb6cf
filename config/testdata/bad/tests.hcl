# test blocks name a pipeline and expect an outcome; a mock stands in for an http or exec
# handler's server or process.
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
  mock { status = 200 }
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

pipeline "hook" {
  source "pipe" {}
  out_retry = "again"
  handler "http" {
    url = "http://127.0.0.1:1/hook"
  }
}

pipeline "charge" {
  source "pipe" {}
  out_retry = "again"
  handler "exec" {
    command = ["./charge"]
  }
}

test "http without a mock" {
  pipeline = "hook"
  expect { outcome = "ack" }
}

test "status for exec" {
  pipeline = "charge"
  mock {
    status = 503
    stderr = "busy"
  }
  expect { outcome = "retry" }
}

test "exit for http" {
  pipeline = "hook"
  mock {
    exit   = 75
    status = 42
  }
  mock { status = 200 }
  expect { outcome = "retry" }
}

test "mock for rules" {
  pipeline = "payouts"
  mock { exit = 0 }
  expect { outcome = "dead_letter" }
}

test "bad delays" {
  pipeline = "hook"
  mock { status = 503 }
  expect {
    outcome   = "retry_after"
    min_delay = "5 s"
    max_delay = "-1s"
  }
}

test "min over max" {
  pipeline = "hook"
  mock { status = 503 }
  expect {
    outcome   = "retry_after()"
    min_delay = "10s"
    max_delay = "5s"
  }
}

test "bounds with a fixed delay" {
  pipeline = "hook"
  mock { status = 503 }
  expect {
    outcome   = "retry_after('5s')"
    max_delay = "10s"
  }
}

test "bounds and reason elsewhere" {
  pipeline = "hook"
  mock { status = 200 }
  expect {
    outcome   = "ack"
    min_delay = "1s"
    reason    = "http 400"
  }
}
