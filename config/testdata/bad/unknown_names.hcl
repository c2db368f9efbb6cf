# Misspelt attributes and blocks get hcl's "Did you mean".
redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

pipelines "typo" {
}

pipeline "p" {
  source "stream" {
    stream  = "s"
    consumr = "me"
  }
  concurency = 4
  rulez "r" {
  }
  rule "r" {
    outcome = "ack"
    emit "stream" {
      key     = "k"
      header  = { a = "'b'" }
    }
  }
}
