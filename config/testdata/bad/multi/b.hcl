redis "main" {
  url = "redis://127.0.0.1:6380/0"
}

pipeline "orders" {
  source "list" {
    key = "orders"
  }
  rule "r" {
    outcome = "ack"
  }
}

pipeline "ok" {
  source "stream" {
    stream = "ok"
    batch  = 0
  }
  rule "r" {
    outcome = "ack"
  }
}

test "t" {
  pipeline = "ok"
  expect { outcome = "ack" }
}
