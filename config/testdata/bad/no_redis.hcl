# A Redis source or emit needs a redis block.
pipeline "p" {
  source "stream" {
    stream = "s"
  }
  rule "r" {
    outcome = "ack"
  }
}

pipeline "q" {
  source "pipe" {}
  out_retry = "again"
  rule "r" {
    outcome = "ack"
    emit "stream" {
      key = "k"
    }
  }
}
