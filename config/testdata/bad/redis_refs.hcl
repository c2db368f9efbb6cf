# Redis references: unknown names, and no default when several blocks exist.
redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

redis "cache" {
  url = "unix:///tmp/redis.sock"
}

redis "bad-url" {
  url = "http://example.com"
}

pipeline "unnamed" {
  source "stream" {
    stream = "s"
  }
  rule "r" {
    outcome = "ack"
    emit "list" {
      redis = "cahce"
      key   = "k"
    }
  }
}

pipeline "typo" {
  source "list" {
    redis = "mian"
    key   = "k"
  }
  rule "r" {
    outcome = "ack"
  }
}

pipeline "emits" {
  source "file" {
    path = "in.jsonl"
  }
  rule "r" {
    outcome = "ack"
    emit "pubsub" {
      key = "channel"
    }
    emit "record" {
      redis = "main"
      key   = "k"
    }
    emit "stream" {
      key  = "k"
      path = "out.jsonl"
    }
    emit "strem" {
      key = "k"
    }
  }
}
