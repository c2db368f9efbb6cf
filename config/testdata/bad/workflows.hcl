# Workflows (SPEC §16): step names, reachability, the shape of steps.
redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

pipeline "order" {
  source "stream" {
    stream = "orders"
  }
  rule "r" {
    outcome = "ack"
    next    = "charge"
  }
}

workflow "order" {
  start {
    source "stream" {
      stream = "orders"
    }
  }

  step "reserve" {
    handler "http" {
      url = "http://stock.internal/reserve"
    }
    next       = "chrage"
    compensate = "relase"
  }

  step "charge" {
    handler "http" {
      url = "http://payments.internal/charge"
    }
    timeout    = "10m"
    on_timeout = "nowhere"
  }

  step "check" {
    rule "declined" {
      when = "payload.status == 'declined'"
      next = "refnd"
    }
  }

  step "both" {
    rule "r" {
      outcome = "ack"
    }
    handler "http" {
      url = "http://x.internal/"
    }
  }

  step "neither" {
    next = "charge"
  }

  step "charge" {
    rule "r" {
      outcome = "ack"
    }
  }
}

workflow "unreachable" {
  start {
    source "stream" {
      stream = "jobs"
    }
  }

  step "first" {
    rule "r" {
      next = "second"
    }
  }

  step "second" {
    rule "r" {
      complete = true
    }
  }

  step "island" {
    rule "r" {
      output = "payload.id"
    }
    next = "first"
  }
}

workflow "unreachable" {
  start {
    source "stream" {
      stream = "jobs2"
    }
  }
  step "a" {
    rule "r" {
      outcome = "ack"
    }
  }
}

workflow "empty" {
}

workflow "later" {
  start {
    source "stream" {
      stream = "later"
    }
  }

  step "wait-for-it" {
    wait {
      source "stream" {
        stream = "events"
      }
      correlate = "payload.id"
    }
    timeout = "1h"
  }

  step "fan-out" {
    for_each  = "payload.items"
    max_items = 10
    handler "http" {
      url = "http://mail.internal/send"
    }
    next = "fan-rules"
  }

  step "fan-rules" {
    for_each = "steps['fan-out']"
    rule "r" {
      outcome = "ack"
    }
    next = "no-fan"
  }

  step "fan-dedupe" {
    for_each = "input.xs"
    handler "http" {
      url = "http://mail.internal/send"
    }
    dedupe {
      key    = "payload"
      window = "1h"
    }
  }

  step "no-fan" {
    max_items = 5
    handler "http" {
      url = "http://mail.internal/send"
    }
  }
}

pipeline "chained" {
  source "stream" {
    stream = "chained"
  }
  next      = "reserve"
  retention = "1h"
  rule "r" {
    outcome = "ack"
  }
}
