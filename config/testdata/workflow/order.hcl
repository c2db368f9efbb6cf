# The order workflow of SPEC §16, without the wait and for_each steps this build refuses.
redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

workflow "order" {
  run_id     = "payload.order_id"
  on_failure = "compensate"
  retention  = "24h"

  start {
    source "stream" {
      stream = "orders"
    }
    concurrency = 2
  }

  step "reserve" {
    handler "http" {
      url = "http://stock.internal/reserve"
    }
    payload      = "{'sku': payload.sku, 'qty': payload.qty}"
    max_attempts = 5
    compensate   = "release"
    next         = "charge"
  }

  step "charge" {
    handler "http" {
      url = "http://payments.internal/charge"
    }
    timeout    = "10m"
    on_timeout = "refund"
    next       = "check-charge"
  }

  step "check-charge" {
    rule "declined" {
      when = "payload.status == 'declined'"
      next = "refund"
    }
    rule "broken" {
      when = "payload.status == 'broken'"
      fail = "'broken charge'"
    }
    rule "paid" {
      output   = "payload.id"
      complete = true
    }
  }

  step "release" {
    handler "http" {
      url = "http://stock.internal/release"
    }
  }

  step "refund" {
    delay = "1m"
    handler "exec" {
      command = ["./bin/refund"]
    }
    concurrency = 3
  }
}

workflow "stopper" {
  redis       = "main"
  on_failure  = "stop"
  dead_letter = "flowrun:{stopper}:failed"

  start {
    source "list" {
      key = "jobs"
    }
  }

  step "only" {
    rule "done" {
      outcome = "ack"
    }
  }
}

pipeline "plain" {
  source "stream" {
    stream = "other"
  }
  rule "r" {
    outcome = "ack"
  }
}
