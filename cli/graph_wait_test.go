package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// graph draws a wait step as "wait STEP", with a dashed edge from its source's key labelled with
// the correlate expression, and its timeout's edge.
func TestGraphWorkflowWait(t *testing.T) {
	out, errOut, code := runCLI(t, "graph", filepath.Join("..", "examples", "checkout.hcl"))
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		`  k_payments[("payments")]`,
		`    w_checkout_await_payment(["wait await-payment"])`,
		`  k_payments -.->|"events by payload.order_id"| w_checkout_await_payment`,
		`  w_checkout_await_payment --> w_checkout_ship`,
		`  w_checkout_await_payment -.->|"timeout 30m"| w_checkout_expire`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
}
