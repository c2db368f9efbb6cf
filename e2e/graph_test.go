package e2e

import (
	"strings"
	"testing"
)

// flowrun graph (SPEC §1): two files, no Redis running; a's emits feed b's source, so the
// graph links a to b through that key, in Mermaid by default and DOT on request, pipelines in
// name order whatever the file order.
func TestGraphChainedPipelines(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "1_b.hcl", `redis "main" {
  url = "redis://127.0.0.1:1/0"
}

pipeline "b" {
  source "stream" {
    stream = "paid"
  }
  rule "all" {
    outcome = "ack"
  }
}
`)
	writeFile(t, dir, "2_a.hcl", `pipeline "a" {
  source "list" {
    key = "orders"
  }
  dead_letter = "orders.dlq"
  rule "pay" {
    emit "stream" {
      key = "paid"
    }
    outcome = "ack"
  }
}
`)
	r := flowrun(t, "", "graph", dir)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("graph: code %d, stderr %q", r.code, r.stderr)
	}
	wantMermaid := `flowchart LR
  p_a["a"]
  p_b["b"]
  k_orders[("orders")]
  k_orders_dlq[("orders.dlq")]
  k_paid[("paid")]
  k_orders -->|"list"| p_a
  p_a -->|"emit stream"| k_paid
  p_a -->|"dead letter"| k_orders_dlq
  k_paid -->|"stream"| p_b
`
	if r.stdout != wantMermaid {
		t.Errorf("mermaid:\n%s\nwant:\n%s", r.stdout, wantMermaid)
	}

	r = flowrun(t, "", "graph", "--format", "dot", dir)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("graph --format dot: code %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{
		"digraph flowrun {\n",
		`"k_orders" -> "p_a" [label="list"];`,
		`"p_a" -> "k_paid" [label="emit stream"];`,
		`"k_paid" -> "p_b" [label="stream"];`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dot output lacks %q:\n%s", want, r.stdout)
		}
	}

	// a config error: as validate prints it, exit 1, nothing on stdout
	bad := writeFile(t, t.TempDir(), "bad.hcl", "pipeline \"p\" {\n  source \"nope\" {}\n}\n")
	r = flowrun(t, "", "graph", bad)
	v := flowrun(t, "", "validate", bad)
	if r.code != 1 || r.stdout != "" || r.stderr == "" || r.stderr != v.stderr {
		t.Errorf("bad config: code %d, stdout %q, stderr %q; validate's stderr %q", r.code, r.stdout, r.stderr, v.stderr)
	}
}
