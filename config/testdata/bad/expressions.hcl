# Expression errors point inside the quoted string, counted in the HCL file.
pipeline "p" {
  source "pipe" {}
  out_retry = "again"
  otherwise = "attempt < 3 ? retry : 'no'"

  rule "large" {
    when    = "payload.amount > 10000 && paylod.x"
    outcome = "retry_after('5x')"
  }
  rule "escaped" {
    when    = "headers[\"a\"] == 'b' && nope"
    outcome = "ack"
  }
  rule "heredoc" {
    when    = <<EOT
key == 'orders' &&
  attempt <
EOT
    outcome = "dorp"
  }
  rule "computed" {
    when    = env("FLOWRUN_TEST_UNSET_WHEN", "key == 1 +")
    outcome = "ack"
  }
  rule "emits" {
    outcome = "ack"
    emit "record" {
      key     = "k"
      payload = "{'id': payload.id,}}"
      headers = {
        ok  = "'fine'"
        bad = "unknown_fn(1)"
      }
    }
  }
  rule "not-a-string" {
    when    = true
    outcome = ""
  }
}
