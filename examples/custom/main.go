// Command payouts is flowrun with one more Go handler compiled in: "payout", from the package
// beside it. Everything else (commands, flags, the built-in handlers log, http and exec) is
// flowrun's own, from package cli:
//
//	go build -o payouts ./examples/custom
//	./payouts plugins
//	printf '%s\n' '{"key":"payouts","payload":{"id":1,"amount":12}}' | ./payouts run examples/custom/payouts.hcl
package main

import (
	"github.com/flowrun/flowrun/cli"
	_ "github.com/flowrun/flowrun/examples/custom/payouts" // the "payout" handler
)

func main() { cli.Main() }
