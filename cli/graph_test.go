package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// Two chained pipelines: a's emit key "paid" is b's source. a also retries through a durable
// delay queue and dead-letters; b's output is records on standard output.
const graphHCL = `redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

pipeline "b" {
  source "stream" {
    stream = "paid"
  }
  rule "notify" {
    emit "record" {
      key = "notices"
    }
    outcome = "ack"
  }
}

pipeline "a" {
  source "stream" {
    stream = "orders"
  }
  delayed_retry = "durable_zset"
  max_attempts  = 3
  dead_letter   = "orders.dlq"
  rule "later" {
    when    = "payload.later == true"
    outcome = "retry_after('1s')"
  }
  rule "pay" {
    emit "stream" {
      key = "paid"
    }
    emit "stream" {
      key = "paid"
    }
    outcome = "ack"
  }
}
`

func writeGraphConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "graph.hcl")
	if err := os.WriteFile(path, []byte(graphHCL), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestGraphMermaid(t *testing.T) {
	path := writeGraphConfig(t)
	want := `flowchart LR
  p_a["a"]
  p_b["b"]
  r_notices[("notices (records)")]
  k_orders[("orders")]
  k_orders_dlq[("orders.dlq")]
  k_orders_delayed[("orders:delayed")]
  k_paid[("paid")]
  k_orders -->|"stream"| p_a
  p_a -->|"emit stream"| k_paid
  p_a -->|"retry"| k_orders_delayed
  p_a -->|"dead letter"| k_orders_dlq
  k_paid -->|"stream"| p_b
  p_b -->|"emit record"| r_notices
`
	for _, args := range [][]string{{"graph", path}, {"graph", "--format", "mermaid", path}} {
		out, errOut, code := runCLI(t, args...)
		if code != 0 || errOut != "" {
			t.Fatalf("%v: code %d, stderr %q", args, code, errOut)
		}
		if out != want {
			t.Errorf("%v:\ngot:\n%s\nwant:\n%s", args, out, want)
		}
	}
}

func TestGraphDOT(t *testing.T) {
	path := writeGraphConfig(t)
	want := `digraph flowrun {
  rankdir=LR;
  "p_a" [label="a", shape=box];
  "p_b" [label="b", shape=box];
  "r_notices" [label="notices (records)", shape=cylinder];
  "k_orders" [label="orders", shape=cylinder];
  "k_orders_dlq" [label="orders.dlq", shape=cylinder];
  "k_orders_delayed" [label="orders:delayed", shape=cylinder];
  "k_paid" [label="paid", shape=cylinder];
  "k_orders" -> "p_a" [label="stream"];
  "p_a" -> "k_paid" [label="emit stream"];
  "p_a" -> "k_orders_delayed" [label="retry"];
  "p_a" -> "k_orders_dlq" [label="dead letter"];
  "k_paid" -> "p_b" [label="stream"];
  "p_b" -> "r_notices" [label="emit record"];
}
`
	out, errOut, code := runCLI(t, "graph", path, "--format=dot")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

// A config error prints as validate prints it and exits 1 with nothing on stdout; an unknown
// format is a usage error.
func TestGraphErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("pipeline \"p\" {\n  source \"nope\" {}\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "graph", bad)
	_, valErr, valCode := runCLI(t, "validate", bad)
	if code != 1 || out != "" || errOut == "" || errOut != valErr || valCode != 1 {
		t.Errorf("graph: code %d, stdout %q, stderr %q; validate stderr %q", code, out, errOut, valErr)
	}
	out, errOut, code = runCLI(t, "graph", "--format", "svg", writeGraphConfig(t))
	if code != 1 || out != "" || errOut == "" {
		t.Errorf("--format svg: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}
