pipeline "orders" {
  source "file" {
    path = "../../examples/data/orders.jsonl"
  }
  concurency = 4
  rule "large" {
    when    = "payload.amount > 10000 && paylod.x"
    outcome = "drop"
  }
}
