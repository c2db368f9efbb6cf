package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Wait steps through the binary (issue 28 item 1, SPEC §16 "Waiting"): an event after the run
// waits and one before it gets there, a timeout to on_timeout and one that fails the run, an
// event for a run that never comes expiring counted rejected, and two processes sharing the
// workflow, one killed while runs wait.

// wfWait is a workflow whose step pay waits for the run's event on the stream "payments",
// timeout (and early events kept) for timeout, on to onTimeout ("" none: the run fails).
func wfWait(timeout, onTimeout string) string {
	ot := ""
	if onTimeout != "" {
		ot = fmt.Sprintf("    on_timeout = %q\n", onTimeout)
	}
	return `workflow "order" {
  run_id = "payload.order_id"
  on_failure = "stop"
` + wfStart + `
  step "reserve" {
    rule "reserve" {
      output = "'reserved ' + run.id"
    }
    next = "pay"
  }

  step "pay" {
    wait {
      source "stream" {
        stream = "payments"
        block  = "100ms"
      }
      correlate = "payload.order_id"
    }
    timeout = "` + timeout + `"
` + ot + `    next    = "ship"
  }

  step "ship" {
    rule "ship" {
      output = "{'paid': steps.pay.amount}"
    }
  }

  step "expire" {
    rule "expire" {
      output = "'expired'"
    }
  }
}
`
}

func (e *streamEnv) payment(fields string) {
	e.t.Helper()
	e.streamXAdd("payments", "payload", fields)
}

// runField is HGET of the run's record.
func (e *streamEnv) runField(id, field string) string {
	return e.rdb.HGet(e.ctx, "flowrun:{order}:run:"+id, field).Val()
}

// waitingAt polls the run's record until it is waiting at pay.
func (e *streamEnv) waitingAtPay(id string) {
	e.t.Helper()
	eventually(e.t, wfDeadline, "run "+id+" waiting at pay", func() bool {
		return e.runField(id, "status") == "waiting" && e.runField(id, "step") == "pay"
	})
}

// paymentsSettled checks that the wait's group holds no pending event and no event is kept.
func (e *streamEnv) paymentsSettled() {
	e.t.Helper()
	eventually(e.t, wfDeadline, "the payments group to have nothing pending", func() bool {
		p, err := e.rdb.XPending(e.ctx, "payments", "order.pay").Result()
		return err == nil && p.Count == 0
	})
	if n := e.rdb.HLen(e.ctx, "flowrun:{order}:kept").Val(); n != 0 {
		e.t.Errorf("%d events still kept", n)
	}
}

func TestWaitEventAfterAndBeforeTheRun(t *testing.T) {
	e := newStreamEnv(t)
	cfg := e.wfConfig(wfWait("1h", "expire"))
	p := start(t, "run", "--consumer", "w1", cfg)

	e.order(`{"order_id":"o-1"}`)
	e.waitingAtPay("o-1")
	if n := e.stepPending("order", "pay"); n != 0 {
		t.Errorf("a waiting run holds %d pending step messages", n)
	}
	if r := flowrun(t, "", "runs", "list", "order", "--status", "waiting", "--json", cfg); r.code != 0 ||
		!strings.Contains(r.stdout, `"id": "o-1"`) || !strings.Contains(r.stdout, `"step": "pay"`) {
		t.Errorf("runs list --status waiting: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	e.payment(`{"order_id":"o-1","amount":12}`)

	e.payment(`{"order_id":"o-2","amount":7}`)
	eventually(t, wfDeadline, "o-2's event kept", func() bool {
		return e.rdb.HExists(e.ctx, "flowrun:{order}:kept", "pay\no-2").Val()
	})
	e.order(`{"order_id":"o-2"}`)

	for id, amount := range map[string]int{"o-1": 12, "o-2": 7} {
		r := waitRun(t, cfg, "order", id, "completed", "failed")
		if r.Status != "completed" || !slices.Equal(r.finished(), []string{"reserve", "pay", "ship"}) {
			t.Errorf("run %s: status %q path %v", id, r.Status, r.finished())
		}
		var ship struct{ Paid int }
		r.output(t, "ship", &ship)
		if ship.Paid != amount {
			t.Errorf("run %s shipped paid %d, want %d", id, ship.Paid, amount)
		}
		if e.runField(id, "status") != "completed" || e.runField(id, "step") != "" {
			t.Errorf("run %s record: %v", id, e.rdb.HGetAll(e.ctx, "flowrun:{order}:run:"+id).Val())
		}
	}
	e.paymentsSettled()
	if n := e.rdb.ZCard(e.ctx, "flowrun:{order}:timeouts").Val(); n != 0 {
		t.Errorf("%d timeouts left", n)
	}
	stopProc(t, p)
}

func TestWaitTimesOut(t *testing.T) {
	for _, c := range []struct {
		name, onTimeout, status string
		path                    []string
	}{
		{"to on_timeout", "expire", "completed", []string{"reserve", "expire"}},
		{"failing the run", "", "failed", []string{"reserve"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newStreamEnv(t)
			cfg := e.wfConfig(wfWait("2s", c.onTimeout))
			p := start(t, "run", "--consumer", "w1", cfg)
			began := time.Now()
			e.order(`{"order_id":"o-1"}`)
			e.waitingAtPay("o-1")
			r := waitRun(t, cfg, "order", "o-1", "completed", "failed")
			if r.Status != c.status || !slices.Equal(r.finished(), c.path) || !slices.Contains(r.outcomes(), "timeout") {
				t.Errorf("status %q path %v outcomes %v, want %s through %v after a timeout", r.Status, r.finished(), r.outcomes(), c.status, c.path)
			}
			if took := r.UpdatedAt.Sub(began); took < 2*time.Second-100*time.Millisecond || took > 5*time.Second {
				t.Errorf("run ended %v after it started; its timeout is 2s", took)
			}
			if c.status == "failed" && (e.runField("o-1", "error") != "timeout" || e.runField("o-1", "failed_step") != "pay") {
				t.Errorf("failed run: %v", e.rdb.HGetAll(e.ctx, "flowrun:{order}:run:o-1").Val())
			}
			if n := e.rdb.ZCard(e.ctx, "flowrun:{order}:timeouts").Val(); n != 0 {
				t.Errorf("%d timeouts left", n)
			}
			e.paymentsSettled()
			stopProc(t, p)
		})
	}
}

func TestWaitUnmatchedEventExpiresRejected(t *testing.T) {
	e := newStreamEnv(t)
	cfg := e.wfConfig(wfWait("1s", "expire"))
	addr := freeAddr(t)
	p := start(t, "run", "--consumer", "w1", "--http-addr", addr, cfg)
	e.payment(`{"order_id":"nobody","amount":1}`)
	eventually(t, wfDeadline, "the event kept", func() bool {
		return e.rdb.HExists(e.ctx, "flowrun:{order}:kept", "pay\nnobody").Val()
	})
	re := regexp.MustCompile(`(?m)^flowrun_messages_total\{outcome="rejected",pipeline="order.pay"\} 1$`)
	eventually(t, wfDeadline, "the kept event counted rejected", func() bool {
		_, body := httpGet("http://" + addr + "/metrics")
		return re.MatchString(body)
	})
	if n := e.rdb.ZCard(e.ctx, "flowrun:{order}:kept_due").Val(); n != 0 {
		t.Errorf("%d kept events due", n)
	}
	if e.rdb.Exists(e.ctx, "flowrun:{order}:run:nobody").Val() != 0 {
		t.Errorf("a run was made for the unmatched event")
	}
	e.paymentsSettled()
	stopProc(t, p)
}

// TestWaitSurvivesAKilledProcess: two processes run the workflow; runs wait, the one that
// parked them (or either) is killed with SIGKILL, and the other fires the timeouts and finishes
// the waits whose events come.
func TestWaitSurvivesAKilledProcess(t *testing.T) {
	e := newStreamEnv(t)
	cfg := e.wfConfig(wfWait("4s", "expire"))
	p1 := start(t, "run", "--consumer", "w1", cfg)
	p2 := start(t, "run", "--consumer", "w2", cfg)
	ids := []string{"o-1", "o-2", "o-3", "o-4"}
	for _, id := range ids {
		e.order(fmt.Sprintf(`{"order_id":%q}`, id))
	}
	for _, id := range ids {
		e.waitingAtPay(id)
	}
	p1.signal(syscall.SIGKILL)
	p1.wait(10 * time.Second)
	e.payment(`{"order_id":"o-1","amount":1}`)
	e.payment(`{"order_id":"o-2","amount":2}`)
	for _, id := range ids {
		r := waitRun(t, cfg, "order", id, "completed", "failed")
		want := []string{"reserve", "expire"}
		if id == "o-1" || id == "o-2" {
			want = []string{"reserve", "pay", "ship"}
		}
		if r.Status != "completed" || !slices.Equal(r.finished(), want) {
			t.Errorf("run %s: status %q path %v, want completed through %v", id, r.Status, r.finished(), want)
		}
		if e.runField(id, "status") != "completed" {
			t.Errorf("run %s record status %q", id, e.runField(id, "status"))
		}
	}
	if n := e.rdb.ZCard(e.ctx, "flowrun:{order}:timeouts").Val(); n != 0 {
		t.Errorf("%d timeouts left", n)
	}
	e.paymentsSettled()
	stopProc(t, p2)
}
