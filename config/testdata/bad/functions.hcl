# Function errors point at the call.
redis "main" {
  url      = env("FLOWRUN_TEST_UNSET")
  password = env("FLOWRUN_TEST_UNSET", "a", "b")
  username = file("no-such-file.txt")
}

pipeline "p" {
  source "stream" {
    stream = jsonencode()
  }
  rule "r" {
    outcome = "ack"
  }
}
