# A missing attribute points at the block that lacks it.
redis "nothing" {
  username = "u"
}

redis "sentinel" {
  sentinel {
    master = "m"
  }
  tls {
    cert_file = "c.pem"
  }
}

pipeline "stream" {
  source "stream" {
    redis = "sentinel"
  }
  rule "r" {
    when = "true"
    emit "stream" {
      redis = "sentinel"
    }
  }
}

pipeline "claiming" {
  source "claiming" {
    redis  = "sentinel"
    stream = "s"
  }
  handler "log" {}
}

pipeline "list" {
  source "list" {
    redis = "sentinel"
  }
  handler "log" {}
}

pipeline "file" {
  source "file" {}
  handler "log" {}
}

pipeline "pubsub" {
  source "pubsub" {
    redis = "sentinel"
  }
  handler "log" {}
}

pipeline "nothing" {
}
