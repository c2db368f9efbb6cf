pipeline "third" {
  source "stream" {
    stream = "third"
  }
  concurrency = -1
  rule "r" {
    outcome = "ack"
  }
}
