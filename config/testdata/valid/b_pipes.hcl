pipeline "replay" {
  source "file" {
    path       = "data/orders.jsonl"
    key        = "orders"
    follow     = true
    checkpoint = "data/orders.offset"
  }
  rule "copy" {
    when    = <<EOT
key == 'orders' &&
  attempt < 3
EOT
    outcome = "attempt < 3 ? retry : drop"
    emit "record" {
      key  = "orders.copy"
      path = "out/copy.jsonl"
    }
    emit "list" {
      key = "orders.todo"
    }
  }
  otherwise = "drop"
}

pipeline "stdin" {
  source "pipe" {}
  out_retry = "again"
  handler "log" {}
}

pipeline "queue" {
  source "list" {
    key = "jobs"
  }
  rule "all" {
    outcome = "ack"
  }
}

pipeline "events" {
  source "pubsub" {
    patterns = ["events.*"]
  }
  retry_to = "events.retry"
  rule "flaky" {
    when    = "headers['flaky'] == 'yes'"
    outcome = "retry"
  }
}

pipeline "news" {
  source "pubsub" {
    patterns = ["news.*"]
  }
  rule "all" {
    outcome = "attempt > 1 ? drop : ack"
  }
}

pipeline "durable" {
  source "stream" {
    stream = "{jobs}"
  }
  concurrency   = 2
  delayed_retry = "durable_zset"
  rule "all" {
    outcome = "retry_after(backoff('1s', '1m'))"
  }
}
