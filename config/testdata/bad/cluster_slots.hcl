# Keys that must share a Redis Cluster slot and do not (SPEC §5, §12).
redis "cluster" {
  cluster = ["10.0.0.1:7000", "10.0.0.2:7000"]
}

redis "single" {
  url = "redis://127.0.0.1:6379/0"
}

pipeline "tagged-stream-other-tag" {
  source "stream" {
    redis  = "cluster"
    stream = "{a}jobs"
  }
  delayed_retry = "durable_zset"
  delay_key     = "{b}jobs:delayed"
  rule "r" {
    outcome = "retry_after('5s')"
  }
}

pipeline "tagged-stream-untagged-delay-key" {
  source "claiming" {
    redis    = "cluster"
    stream   = "{a}jobs"
    min_idle = "30s"
  }
  delayed_retry = "durable_zset"
  delay_key     = "later"
  rule "r" {
    outcome = "retry_after('5s')"
  }
}

pipeline "untagged-stream" {
  source "stream" {
    redis  = "cluster"
    stream = "jobs"
  }
  delayed_retry = "durable_zset"
  rule "r" {
    outcome = "retry_after('5s')"
  }
}

pipeline "untagged-stream-and-delay-key" {
  source "reclaim" {
    redis    = "cluster"
    stream   = "jobs"
    min_idle = "30s"
  }
  delayed_retry = "durable_zset"
  delay_key     = "jobs-later"
  rule "r" {
    outcome = "retry_after('5s')"
  }
}

pipeline "braces-without-a-tag" {
  source "stream" {
    redis  = "cluster"
    stream = "{}jobs"
  }
  delayed_retry = "durable_zset"
  rule "r" {
    outcome = "retry_after('5s')"
  }
}

pipeline "untagged-list" {
  source "list" {
    redis = "cluster"
    key   = "queue"
  }
  rule "r" {
    outcome = "ack"
  }
}

pipeline "list-other-processing" {
  source "list" {
    redis      = "cluster"
    key        = "{q}queue"
    processing = "queue:processing"
  }
  rule "r" {
    outcome = "ack"
  }
}

pipeline "untagged-list-and-processing" {
  source "list" {
    redis      = "cluster"
    key        = "queue"
    processing = "queue:mine"
  }
  rule "r" {
    outcome = "ack"
  }
}

# Fine: tags shared, defaults that follow a tag, a simple list, and a single node.
pipeline "fine-stream" {
  source "stream" {
    redis  = "cluster"
    stream = "{ok}jobs"
  }
  delayed_retry = "durable_zset"
  rule "r" {
    outcome = "retry_after('5s')"
  }
}

pipeline "fine-list" {
  source "list" {
    redis = "cluster"
    key   = "{ok}queue"
  }
  rule "r" {
    outcome = "ack"
  }
}

pipeline "fine-simple-list" {
  source "list" {
    redis    = "cluster"
    key      = "queue"
    reliable = false
  }
  rule "r" {
    outcome = "ack"
  }
}

pipeline "fine-single-node" {
  source "stream" {
    redis  = "single"
    stream = "jobs"
  }
  delayed_retry = "durable_zset"
  rule "r" {
    outcome = "retry_after('5s')"
  }
}

# A workflow's keys live under flowrun:{NAME}:, so its dead letter must too (SPEC §16).
workflow "order" {
  redis       = "cluster"
  dead_letter = "order.dead"
  start {
    source "stream" {
      stream = "orders"
    }
  }
  step "s" {
    rule "r" {
      outcome = "ack"
    }
  }
}

workflow "tagged" {
  redis       = "cluster"
  dead_letter = "flowrun:{tagged}:failed"
  start {
    source "stream" {
      stream = "{tagged}orders"
    }
  }
  step "s" {
    rule "r" {
      outcome = "ack"
    }
  }
}
