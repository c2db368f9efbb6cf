redis "main" {
  url = "redis://127.0.0.1:1"
}

pipeline "fwd" {
  source "stream" {
    stream = "in"
  }
  rule "names" {
    emit "stream" {
      key             = "out"
      forward_headers = ["tenant", "trace"]
    }
    outcome = "ack"
  }
  rule "word" {
    emit "list" {
      key             = "out.list"
      forward_headers = "all"
    }
    outcome = "ack"
  }
  rule "number" {
    emit "pubsub" {
      key             = "out.ch"
      forward_headers = 1
    }
    outcome = "ack"
  }
}
