redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

pipeline "orders" {
  source "stream" {
    stream = "orders"
  }
  rule "r" {
    outcome = "ack"
  }
  rule "r" {
    outcome = "drop"
  }
}

test "t" {
  pipeline = "orders"
  expect { outcome = "ack" }
}
