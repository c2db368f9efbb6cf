telemetry {
  otlp_endpoint = "127.0.0.1:4318"
  sample_ratio  = 1.5
  exporter      = "otlp"
}

telemetry {
  sample_ratio = "all"
}

pipeline "replay" {
  source "pipe" {}
  out_retry = "retries"
  rule "all" {
    outcome = "ack"
  }
}
