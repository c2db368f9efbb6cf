pipeline "p" {
  source "pipe" {}
  out_retry = "again"
  rule "r" {
    outcome = "ack
  }
}
