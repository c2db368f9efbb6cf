# A test of the pipeline of examples/webhook.hcl that expects the wrong delay, so that it fails:
# docs/config-tests.md shows what `flowrun test examples/webhook.hcl docs/testdata/webhook.hcl`
# prints (docs/pages_test.go runs it).

test "a busy endpoint is tried again in 10s" {
  pipeline = "webhook"
  mock {
    status  = 503
    headers = { "Retry-After" = "7" }
  }
  expect { outcome = "retry_after('10s')" }
}
