# Payouts through a compiled Go handler (SPEC §8), in a binary built from examples/custom:
# records in on stdin, paid payouts, retry copies and dead letters out on stdout.
#
#   go build -o payouts ./examples/custom
#   printf '%s\n' \
#     '{"key":"payouts","payload":{"id":1,"amount":12}}' \
#     '{"key":"payouts","payload":{"id":2,"amount":-5}}' \
#     '{"key":"payouts","headers":{"gateway":"down"},"payload":{"id":3,"amount":7}}' \
#     | ./payouts run examples/custom/payouts.hcl
#
# Payout 1 is paid (a payouts.done record), payout 2 goes to payouts.dlq with
# x-dead-letter-reason "payout 2: amount must be positive, got -5", and payout 3 leaves as a
# payouts.retry record with x-retry-count 1 after a backoff of at most base. Feed retry copies
# back in (as key payouts) and the third attempt goes to payouts.dlq: max_attempts 3 reached.

pipeline "payouts" {
  source "pipe" {
    key = "payouts"
  }
  out_retry        = "payouts.retry" # retry copies leave on stdout under this key
  max_attempts     = 3
  dead_letter      = "payouts.dlq"
  concurrency      = 4
  shutdown_timeout = "5s"

  handler "payout" {
    base     = "100ms" # backoff: at most base * 2^(attempt-1), capped by max
    max      = "2s"
    done_key = "payouts.done"
    # fail_attempts = 1 # uncomment: the gateway fails each payout's first attempt
  }
}

# Tests, run by the binary that has the handler compiled in (no gateway is called: the handler
# simulates it):
#
#   ./payouts test examples/custom/payouts.hcl

test "a payout is paid and announced" {
  pipeline = "payouts"
  message { payload = jsonencode({ id = 1, amount = 12 }) }
  expect {
    outcome = "ack"
    emits   = [{ kind = "record", key = "payouts.done", payload = { id = 1, paid = true } }]
  }
}

test "a negative amount is dead-lettered" {
  pipeline = "payouts"
  message { payload = jsonencode({ id = 2, amount = -5 }) }
  expect {
    outcome = "dead_letter"
    reason  = "payout 2: amount must be positive, got -5"
  }
}

test "a payout waits while the gateway is down" {
  pipeline = "payouts"
  message {
    payload = jsonencode({ id = 3, amount = 7 })
    headers = { gateway = "down" }
    attempt = 2
  }
  expect {
    outcome   = "retry_after" # backoff of at most base * 2^(attempt-1): 200ms
    max_delay = "200ms"
  }
}
