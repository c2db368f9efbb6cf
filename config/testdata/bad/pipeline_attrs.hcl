# max_held (SPEC §5) and a dead letter that is the source's own key (SPEC §2).
pipeline "zero" {
  source "file" {
    path = "in.jsonl"
  }
  max_held = 0
  rule "r" {
    outcome = "ack"
  }
}

pipeline "fraction" {
  source "pipe" {}
  out_retry = "again"
  max_held  = 1.5
  rule "r" {
    outcome = "ack"
  }
}

pipeline "text" {
  source "file" {
    path = "in.jsonl"
  }
  max_held = "many"
  rule "r" {
    outcome = "ack"
  }
}

pipeline "fine" {
  source "file" {
    path = "in.jsonl"
  }
  max_held    = 500
  dead_letter = "orders.dlq"
  rule "r" {
    outcome = "ack"
  }
}

pipeline "own-dead-letter" {
  source "file" {
    path = "in.jsonl"
    key  = "orders"
  }
  dead_letter = "orders"
  rule "r" {
    outcome = "ack"
  }
}
