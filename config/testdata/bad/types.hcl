# Wrong types and out-of-range values point at the value.
redis "main" {
  cluster = "10.0.0.1:7000"
}

pipeline "p" {
  source "reclaim" {
    stream   = ["s"]
    min_idle = 30
    batch    = "many"
    block    = "1x"
    start    = "1"
  }
  concurrency      = 0
  max_attempts     = 1.5
  shutdown_timeout = "-1s"
  dead_letter      = ""
  rule "r" {
    outcome = "ack"
  }
}

pipeline "q" {
  source "list" {
    key      = "k"
    reliable = "maybe"
    block    = "0s"
  }
  rule "r" {
    outcome = 3
  }
}
