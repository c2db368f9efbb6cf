# Handlers are looked up among the compiled ones and decode their own bodies.
pipeline "typo" {
  source "pipe" {}
  out_retry = "again"
  handler "lgo" {}
}

pipeline "log-takes-nothing" {
  source "pipe" {}
  out_retry = "again"
  handler "log" {
    level = "debug"
  }
}

pipeline "hook" {
  source "pipe" {}
  out_retry = "again"
  handler "confighook" {
    url     = ["not", "a", "string"]
    retries = 9
  }
}

pipeline "hook-missing-url" {
  source "pipe" {}
  out_retry = "again"
  handler "confighook" {
  }
}
