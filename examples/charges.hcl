# Charges made by a program per message through the built-in exec handler: records in
# on stdin, each written to bin/charge's stdin; what it prints becomes a record, exit 75 asks for
# a retry, any other failure goes to a dead letter. The tests run no process: a mock block stands
# in for it.
#
#   printf '%s\n' '{"key":"charges","payload":{"id":1,"amount":12}}' \
#     | go run ./cmd/flowrun run examples/charges.hcl
#   go run ./cmd/flowrun test examples/charges.hcl

pipeline "charges" {
  source "pipe" {
    key = "charges"
  }
  out_retry    = "charges.retry" # retry copies leave on stdout under this key
  max_attempts = 3
  dead_letter  = "charges.dlq"

  handler "exec" {
    command     = ["./charge"] # no shell; run from dir
    dir         = "bin"        # relative to this file
    timeout     = "10s"
    emit_stdout = "charges.done" # each line printed on exit 0 becomes a record
  }
}

test "a charge is made and announced" {
  pipeline = "charges"
  message { payload = jsonencode({ id = 1, amount = 12 }) }
  mock { stdout = jsonencode({ paid = true, charge = { id = 1, amount = 12 } }) }
  expect {
    outcome = "ack"
    emits   = [{ kind = "record", key = "charges.done", payload = { paid = true, charge = { id = 1, amount = 12 } } }]
  }
}

test "a busy gateway is retried" {
  pipeline = "charges"
  message {
    payload = jsonencode({ id = 2, amount = 12 })
    headers = { gateway = "down" }
  }
  mock {
    exit   = 75
    stderr = "gateway busy"
  }
  expect { outcome = "retry" }
}

test "a declined card is dead-lettered with the reason" {
  pipeline = "charges"
  message { payload = jsonencode({ id = 3, amount = -5 }) }
  mock {
    exit   = 2
    stderr = "card declined"
  }
  expect {
    outcome = "dead_letter"
    reason  = "exit status 2: card declined"
  }
}
