# The README's tour, second step: a Redis stream whose failing jobs go to a dead letter after two
# attempts. Start any Redis 6.2 or newer, then:
#
#   REDIS_URL=redis://127.0.0.1:6379/0 flowrun run examples/tour.hcl
#   redis-cli XADD jobs '*' payload '{"id":1,"ok":true}'
#   redis-cli XADD jobs '*' payload '{"id":2,"ok":false}'
#   flowrun dlq list jobs examples/tour.hcl
#   flowrun test examples/tour.hcl

redis "tour" {
  url = env("REDIS_URL", "redis://127.0.0.1:6379/0")
}

pipeline "jobs" {
  source "stream" {
    redis  = "tour"
    stream = "jobs"
  }
  max_attempts = 2
  dead_letter  = "jobs.dlq"

  rule "failing" {
    when    = "payload.ok == false"
    outcome = "retry"
  }

  rule "done" {
    emit "stream" {
      key     = "jobs.done"
      payload = "{'id': payload.id}"
    }
    outcome = "ack"
  }
}

test "a failing job is retried" {
  pipeline = "jobs"
  message { payload = jsonencode({ id = 2, ok = false }) }
  expect { outcome = "retry" }
}

test "a job that works is acknowledged and announced" {
  pipeline = "jobs"
  message { payload = jsonencode({ id = 1, ok = true }) }
  expect {
    outcome = "ack"
    emits   = [{ kind = "stream", key = "jobs.done", payload = jsonencode({ id = 1 }) }]
  }
}
