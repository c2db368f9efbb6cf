package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/config"
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

// A workflow fed by a pipeline's emit key: its start, a state per step (a choice step of rules
// alone as a diamond), next edges plain, rules' next, complete and fail labelled, timeouts and
// compensations dashed, and the ends a run reaches.
const workflowGraphHCL = `redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

pipeline "intake" {
  source "stream" {
    stream = "raw"
  }
  rule "fwd" {
    emit "stream" {
      key = "orders"
    }
    outcome = "ack"
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
    compensate = "release"
    timeout    = "90s"
    next       = "check"
  }

  step "check" {
    rule "declined" {
      when = "input.declined == true"
      next = "refund"
    }
    rule "broken" {
      when = "input.broken == true"
      fail = "'broken'"
    }
    rule "express" {
      when     = "input.express == true"
      complete = true
    }
    next = "ship"
  }

  step "ship" {
    handler "http" {
      url = "http://ship.internal/"
    }
    timeout    = "72h"
    on_timeout = "refund"
  }

  step "release" {
    handler "http" {
      url = "http://stock.internal/release"
    }
  }

  step "refund" {
    delay = "1m"
    handler "http" {
      url = "http://pay.internal/refund"
    }
  }
}
`

func writeWorkflowGraphConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "workflow.hcl")
	if err := os.WriteFile(path, []byte(workflowGraphHCL), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestGraphWorkflowMermaid(t *testing.T) {
	want := `flowchart LR
  p_intake["intake"]
  k_orders[("orders")]
  k_raw[("raw")]
  k_raw -->|"stream"| p_intake
  p_intake -->|"emit stream"| k_orders
  subgraph w_order["workflow order"]
    w_order_start(("start"))
    w_order_reserve(["reserve"])
    w_order_check{"check"}
    w_order_ship(["ship"])
    w_order_release(["release"])
    w_order_refund(["refund (delay 1m)"])
    w_order_failed((("failed")))
    w_order_completed((("completed")))
  end
  k_orders -->|"stream"| w_order_start
  w_order_start --> w_order_reserve
  w_order_reserve --> w_order_check
  w_order_reserve -.->|"timeout 1m30s"| w_order_failed
  w_order_reserve -.->|"compensate"| w_order_release
  w_order_check -->|"rule declined"| w_order_refund
  w_order_check -->|"rule broken: fail"| w_order_failed
  w_order_check -->|"rule express"| w_order_completed
  w_order_check --> w_order_ship
  w_order_ship --> w_order_completed
  w_order_ship -.->|"timeout 72h"| w_order_refund
  w_order_refund --> w_order_completed
`
	out, errOut, code := runCLI(t, "graph", writeWorkflowGraphConfig(t))
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

func TestGraphWorkflowDOT(t *testing.T) {
	want := `digraph flowrun {
  rankdir=LR;
  "p_intake" [label="intake", shape=box];
  "k_orders" [label="orders", shape=cylinder];
  "k_raw" [label="raw", shape=cylinder];
  "k_raw" -> "p_intake" [label="stream"];
  "p_intake" -> "k_orders" [label="emit stream"];
  subgraph "cluster_w_order" {
    label="workflow order";
    "w_order_start" [label="start", shape=circle];
    "w_order_reserve" [label="reserve", shape=box, style=rounded];
    "w_order_check" [label="check", shape=diamond];
    "w_order_ship" [label="ship", shape=box, style=rounded];
    "w_order_release" [label="release", shape=box, style=rounded];
    "w_order_refund" [label="refund (delay 1m)", shape=box, style=rounded];
    "w_order_failed" [label="failed", shape=doublecircle];
    "w_order_completed" [label="completed", shape=doublecircle];
  }
  "k_orders" -> "w_order_start" [label="stream"];
  "w_order_start" -> "w_order_reserve";
  "w_order_reserve" -> "w_order_check";
  "w_order_reserve" -> "w_order_failed" [label="timeout 1m30s", style=dashed];
  "w_order_reserve" -> "w_order_release" [label="compensate", style=dashed];
  "w_order_check" -> "w_order_refund" [label="rule declined"];
  "w_order_check" -> "w_order_failed" [label="rule broken: fail"];
  "w_order_check" -> "w_order_completed" [label="rule express"];
  "w_order_check" -> "w_order_ship";
  "w_order_ship" -> "w_order_completed";
  "w_order_ship" -> "w_order_refund" [label="timeout 72h", style=dashed];
  "w_order_refund" -> "w_order_completed";
}
`
	out, errOut, code := runCLI(t, "graph", "--format", "dot", writeWorkflowGraphConfig(t))
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if out != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}

// validate counts workflows, and --json carries their diagnostics, warnings included, each at
// its place.
func TestValidateWorkflow(t *testing.T) {
	out, errOut, code := runCLI(t, "validate", writeWorkflowGraphConfig(t))
	if code != 0 || errOut != "" || out != "ok: 1 pipelines, 1 workflows\n" {
		t.Errorf("validate: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	bad := strings.Replace(workflowGraphHCL, `next = "refund"`, `next = "refnd"`, 1)
	bad = strings.Replace(bad, `on_timeout = "refund"`, `on_timeout = "ship"`, 1)
	path := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCLI(t, "validate", "--json", path)
	if code != 1 {
		t.Errorf("validate --json: code %d", code)
	}
	var diags []config.JSONDiagnostic
	if err := json.Unmarshal([]byte(out), &diags); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(diags) != 1 || diags[0].Severity != "error" || diags[0].Line != 36 || diags[0].Col != 14 ||
		!strings.Contains(diags[0].Message, `There is no step "refnd" in workflow "order". Did you mean "refund"?`) {
		t.Errorf("diagnostics: %+v", diags)
	}
	fixed := strings.Replace(bad, `"refnd"`, `"ship"`, 1)
	if err := os.WriteFile(path, []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCLI(t, "validate", "--json", path)
	diags = nil
	if err := json.Unmarshal([]byte(out), &diags); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if code != 0 || len(diags) != 1 || diags[0].Severity != "warning" || diags[0].Line != 63 ||
		!strings.Contains(diags[0].Message, `reaches step "refund"`) {
		t.Errorf("code %d, diagnostics: %+v", code, diags)
	}
}
