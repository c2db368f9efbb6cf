# Combinations SPEC §2 forbids.
redis "main" {
  url     = "redis://127.0.0.1:6379/0"
  cluster = ["10.0.0.1:7000"]
}

pipeline "stream" {
  source "stream" {
    stream   = "s"
    min_idle = "30s"
    reliable = true
  }
  delayed_retry = "durable"
  out_retry     = "again"
  retry_to      = "x"
  rule "r" {
    outcome = "ack"
  }
}

pipeline "runtime-delay-key" {
  source "stream" {
    stream = "s"
  }
  delay_key = "s:delayed"
  rule "r" {
    outcome = "ack"
  }
}

pipeline "list" {
  source "list" {
    key        = "k"
    reliable   = false
    processing = "k:p"
  }
  delayed_retry = "durable_zset"
  delay_key     = "k:delayed"
  rule "r" {
    outcome = "ack"
  }
}

pipeline "pipe" {
  source "pipe" {}
  rule "r" {
    outcome = "ack"
  }
}

pipeline "patterns" {
  source "pubsub" {
    patterns = ["a.*"]
  }
  rule "r" {
    outcome = "attempt < 3 ? retry : drop"
  }
}

pipeline "channels" {
  source "pubsub" {
    channels = ["a"]
    patterns = ["a.*"]
  }
  retry_to = "a.retry"
  rule "r" {
    outcome = "ack"
  }
}

pipeline "kind" {
  source "strem" {
    stream = "s"
  }
  rule "r" {
    outcome = "ack"
  }
}

pipeline "both" {
  source "stream" {
    stream = "s"
  }
  source "list" {
    key = "k"
  }
  otherwise = "drop"
  rule "r" {
    outcome = "ack"
  }
  handler "log" {}
}

pipeline "handler-otherwise" {
  source "pipe" {}
  out_retry = "again"
  otherwise = "drop"
  handler "log" {}
  handler "log" {}
}
