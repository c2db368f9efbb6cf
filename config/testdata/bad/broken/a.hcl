# This file does not parse: references to it from b.hcl are not reported.
redis "main" {
  url = "redis://127.0.0.1:6379/0
}
