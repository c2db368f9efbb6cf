# Workflow and step attributes (SPEC §16): values, and names written in the wrong block.
redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

redis "other" {
  url = "redis://127.0.0.1:6379/1"
}

workflow "order" {
  redis      = "mian"
  on_failure = "compensation"
  retention  = "a week"
  next       = "reserve"

  source "stream" {
    stream = "orders"
  }

  start {
    source "stream" {
      stream = "orders"
    }
    delayed_retry = "durable_zset"
    nxt           = "x"
  }

  step "reserve" {
    handler "http" {
      url = "http://stock.internal/reserve"
    }
    timeout       = "-1s"
    delay         = "soon"
    on_timeout    = "reserve"
    retention     = "1h"
    dead_letter   = "order.dlq"
    delayed_retry = "durable_zset"
    payload       = "payload.("
    max_attempts  = 0
    nxet          = "reserve"
  }

  step "check" {
    rule "r" {
      complete = "yes"
      output   = "payload +"
    }
    rule "both" {
      when     = "payload.x == 1"
      next     = "reserve"
      complete = true
    }
    rule "failing" {
      fail = "'no'"
      next = "reserve"
    }
    rule "fine" {
      complete = false
      next     = "reserve"
    }
    on_timeout = "reserve"
  }
}

workflow "both-redis" {
  start {
    source "stream" {
      stream = "b"
    }
  }
  step "s" {
    rule "r" {
      outcome = "ack"
    }
  }
}
