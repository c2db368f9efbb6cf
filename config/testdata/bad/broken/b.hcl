pipeline "p" {
  source "stream" {
    stream = "s"
    redis  = "main"
  }
  concurrency = 0
  rule "r" {
    outcome = "ack"
  }
}
