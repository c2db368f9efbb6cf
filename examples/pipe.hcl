# A Unix filter: records in on stdin, records out on stdout.
#
#   printf '%s\n' '{"key":"events","payload":{"type":"signup","user":"ada"}}' \
#     | go run ./cmd/flowrun run examples/pipe.hcl

pipeline "events" {
  source "pipe" {
    key = "events" # default: every key
  }

  out_retry    = "events.retry" # retry copies leave on stdout under this key
  max_attempts = 3
  dead_letter  = "events.dead"

  rule "welcome" {
    when = "payload.type == 'signup'"
    emit "record" {
      key     = "emails"
      payload = "{'to': payload.user, 'template': 'welcome'}"
    }
    outcome = "ack"
  }
  rule "not-yet" {
    when    = "headers['ready'] == 'no'"
    outcome = "retry_after('200ms')"
  }
  otherwise = "drop"
}

test "signups get a welcome email" {
  pipeline = "events"
  message { payload = jsonencode({ type = "signup", user = "ada" }) }
  expect {
    outcome = "ack"
    emits   = [{ kind = "record", key = "emails", payload = jsonencode({ to = "ada", template = "welcome" }) }]
  }
}

test "events that are not ready wait" {
  pipeline = "events"
  message {
    payload = jsonencode({ type = "order" })
    headers = { ready = "no" }
  }
  expect { outcome = "retry_after('200ms')" }
}
