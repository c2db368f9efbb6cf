package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The runs of a workflow on the status page (SPEC §16, issue 28 item 4), in headless chromium
// against the built binary and a real redis-server: counts per status and per step, a run found
// by id and its timeline, hostile ids and inputs shown as characters, cancel with the admin token
// and refused without it, and the layout at 360 px.

const hostileRunID = `<img src=x onerror="window.pwned='id'">`

const statusRunsWorkflow = `
workflow "order" {
  run_id = "payload.order_id"
  start {
    source "stream" {
      stream = "sr.orders"
      block  = "100ms"
    }
  }

  step "check" {
    rule "negative" {
      when = "input.amount < 0"
      fail = "'refused amount ' + string(input.amount) + ' <script>window.pwned=1</script>'"
    }
    rule "wait" {
      when = "input.wait == true"
      next = "pay"
    }
    rule "slow" {
      when   = "input.slow == true"
      next   = "approve"
      output = "{'checked': input.note}"
    }
    rule "ok" {
      output = "{'checked': true}"
    }
  }

  step "approve" {
    rule "not-yet" {
      outcome = "retry_after('1h')"
    }
    max_attempts = 10
    timeout      = "2h"
  }

  step "pay" {
    wait {
      source "stream" {
        stream = "sr.payments"
        block  = "100ms"
      }
      correlate = "payload.order_id"
    }
    timeout = "3h"
  }
}
`

// runCount is the expression for a count on the workflow's card.
func runCount(table, key string) string {
	return fmt.Sprintf(`(document.querySelector('.card.workflow[data-workflow="order"] .%s tr[data-key=%q] td:nth-child(2)')||{}).textContent`, table, key)
}

func TestStatusRunsInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newInspEnv(t)
	cfg := e.config(statusRunsWorkflow)
	const token = "runs-t0ken"
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, "--admin-token", token, cfg)
	base := "http://" + addr + "/"
	eventually(t, 10*time.Second, "the http server", func() bool { code, _ := httpGet(base + "healthz"); return code == 200 })

	runKey := func(id string) string { return "flowrun:{order}:run:" + id }
	status := func(id string) string { return e.rdb.HGet(e.ctx, runKey(id), "status").Val() }
	for _, o := range []struct{ id, payload string }{
		{"A-1", `{"order_id":"A-1","amount":10}`},
		{"A-2", `{"order_id":"A-2","amount":-5}`},
		{"A-3", `{"order_id":"A-3","amount":7,"slow":true,"note":"first"}`},
		{hostileRunID, fmt.Sprintf(`{"order_id":%q,"amount":3,"slow":true,"note":"</pre><script>window.pwned='input'</script>"}`, hostileRunID)},
		{"B-1", `{"order_id":"B-1","amount":1,"wait":true}`},
	} {
		// one at a time, each started before the next is sent: the list is newest first
		e.xadd("sr.orders", "", "payload", o.payload)
		eventually(t, 10*time.Second, "run "+o.id+" started", func() bool { return status(o.id) != "" })
	}
	eventually(t, 20*time.Second, "the runs settled: completed, failed, one waiting, and two at approve after a retry", func() bool {
		return status("A-1") == "completed" && status("A-2") == "failed" && status("B-1") == "waiting" &&
			e.rdb.LLen(e.ctx, "flowrun:{order}:hist:A-3").Val() == 3 && e.rdb.LLen(e.ctx, "flowrun:{order}:hist:"+hostileRunID).Val() == 3
	})

	if err := chromedp.Do(ctx, chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	js[bool](t, ctx, `window.violations = []; document.addEventListener("securitypolicyviolation", (e) => window.violations.push(e.violatedDirective + " " + e.sample)); true`)

	// per workflow: runs per status and active runs per step
	waitJS(t, ctx, 15*time.Second, "the workflow's counts",
		runCount("by-status", "running")+` === "2" && `+runCount("by-status", "completed")+` === "1" && `+runCount("by-status", "failed")+` === "1" && `+
			runCount("by-status", "waiting")+` === "1" && `+runCount("by-step", "approve")+` === "2" && `+runCount("by-step", "pay")+` === "1"`,
		`document.getElementById("runs-section").innerText`)
	if got := js[string](t, ctx, runCount("by-step", "check")); got != "0" {
		t.Errorf("active at check: %q", got)
	}
	// the workflow's pipelines have cards: the start, each step's, the wait's events
	for expr, want := range map[string]string{
		cardText("order", "kind"):                                   "stream",
		cardText("order", "key"):                                    "sr.orders",
		cardText("order", "state"):                                  "running",
		cardText("order/check", "kind"):                             "workflow",
		cardText("order/check", "key"):                              "flowrun:{order}:s:check",
		cardText("order/check", "state"):                            "running",
		cardText("order/approve", "state"):                          "running",
		cardText("order/pay", "state"):                              "running",
		cardText("order.pay", "key"):                                "sr.payments",
		cardText("order.pay", "state"):                              "running",
		`document.querySelectorAll("#pipelines .card").length + ""`: "5",
	} {
		if got := js[string](t, ctx, expr); got != want {
			t.Errorf("%s = %q, want %q", expr, got, want)
		}
	}
	if got := js[string](t, ctx, cardOutcome("order", "ack")); got != "5" {
		t.Errorf("the start pipeline acked %s, want the 5 starts", got)
	}
	// the newest first, all of them: as the runs index orders them (two runs started in the
	// same millisecond are in the order of their ids there), and that is the order they were sent
	waitJS(t, ctx, 5*time.Second, "the list of runs", `document.querySelectorAll("#runs-list li.run-item").length === 5`, `document.getElementById("runs-section").innerText`)
	index := e.rdb.ZRevRangeWithScores(e.ctx, "flowrun:{order}:runs", 0, -1).Val()
	var newest []string
	for i, z := range index {
		newest = append(newest, z.Member.(string))
		if i > 0 && z.Score > index[i-1].Score {
			t.Errorf("runs index out of order: %v", index)
		}
	}
	if got := js[string](t, ctx, `Array.from(document.querySelectorAll("#runs-list li.run-item")).map((l) => l.dataset.run).join("|")`); got != strings.Join(newest, "|") ||
		newest[0] != "B-1" || newest[4] != "A-1" {
		t.Errorf("runs listed %s, the index has %s", got, strings.Join(newest, "|"))
	}
	// a status's count lists its runs
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.card.workflow[data-workflow="order"] .by-status tr[data-key="failed"] a`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the failed runs", `document.querySelectorAll("#runs-list li.run-item").length === 1 && document.querySelector("#runs-list li.run-item").dataset.run === "A-2"`,
		`document.getElementById("runs-section").innerText`)
	if got := js[string](t, ctx, `location.search`); !strings.Contains(got, "run_status=failed") || !strings.Contains(got, "workflow=order") {
		t.Errorf("the view is not in the URL: %s", got)
	}

	// a run found by its id: the hostile one, shown as its characters, with its timeline
	findRun(t, ctx, hostileRunID)
	if got := js[string](t, ctx, `document.getElementById("run-title").textContent`); got != hostileRunID {
		t.Errorf("run id shown as %q", got)
	}
	if got := js[string](t, ctx, `Array.from(document.querySelectorAll("#run-timeline li.event .outcome")).map((o) => o.textContent).join(",")`); got != "started,ack,retry after,now" {
		t.Errorf("timeline outcomes %s", got)
	}
	if got := js[string](t, ctx, `Array.from(document.querySelectorAll("#run-timeline li.event .step")).map((o) => o.textContent).join(",")`); got != "check,approve,approve" {
		t.Errorf("timeline steps %s", got)
	}
	if got := js[string](t, ctx, `document.querySelector("#run-timeline li.event:nth-child(2) .since").textContent`); !strings.HasPrefix(got, "+") {
		t.Errorf("no duration since the start: %q", got)
	}
	facts := js[string](t, ctx, `document.getElementById("run-facts").innerText`)
	for _, want := range []string{"Current step\napprove", "Times out at\n", "Visit\n2"} {
		if !strings.Contains(facts, want) {
			t.Errorf("facts lack %q:\n%s", want, facts)
		}
	}
	// the timeout shown is the one in Redis
	ms := e.rdb.ZScore(e.ctx, "flowrun:{order}:timeouts", hostileRunID+"\n2").Val()
	wantAt := time.UnixMilli(int64(ms)).UTC().Format("2006-01-02T15:04:05Z")
	if got := js[string](t, ctx, `document.querySelector("#run-facts .times-out time").textContent`); got != wantAt || ms == 0 {
		t.Errorf("times out at %q, Redis says %s", got, wantAt)
	}
	if got := js[string](t, ctx, `document.getElementById("run-outputs").innerText`); !strings.Contains(got, `"checked": "</pre><script>window.pwned='input'</script>"`) {
		t.Errorf("check's output shown as %q", got)
	}
	if got := js[string](t, ctx, `document.getElementById("run-input").textContent`); !strings.Contains(got, `"order_id": "<img src=x onerror=\"window.pwned='id'\">"`) {
		t.Errorf("input shown as %q", got)
	}

	// the waiting run: the step it waits in, and when it times out
	findRun(t, ctx, "B-1")
	facts = js[string](t, ctx, `document.getElementById("run-facts").innerText`)
	for _, want := range []string{"Waiting in\npay", "Times out at\n"} {
		if !strings.Contains(facts, want) {
			t.Errorf("the waiting run's facts lack %q:\n%s", want, facts)
		}
	}
	if got := js[string](t, ctx, `Array.from(document.querySelectorAll("#run-timeline li.event .outcome")).map((o) => o.textContent).join(",")`); got != "started,ack,waiting" {
		t.Errorf("the waiting run's timeline: %s", got)
	}
	if got := js[string](t, ctx, `document.getElementById("run-status").textContent`); got != "waiting" {
		t.Errorf("the waiting run's status: %q", got)
	}

	// the failed run: its error, retry offered, cancel not
	findRun(t, ctx, "A-2")
	if got := js[string](t, ctx, `document.querySelector("#run-facts .error-fact dd").textContent`); got != "refused amount -5 <script>window.pwned=1</script>" {
		t.Errorf("error shown as %q", got)
	}
	if got := js[string](t, ctx, `Array.from(document.querySelectorAll("#run-timeline li.event .err")).map((o) => o.textContent).join("|")`); !strings.Contains(got, "refused amount -5 <script>") {
		t.Errorf("timeline errors %q", got)
	}
	if !js[bool](t, ctx, `document.getElementById("run-cancel").disabled && !document.getElementById("run-retry").disabled`) {
		t.Errorf("a failed run: cancel must be disabled, retry enabled")
	}

	// nothing from a run became an element, nothing ran, the CSP blocked nothing
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if got := js[string](t, ctx, `String(window.pwned)`); got != "undefined" {
			t.Fatalf("hostile content ran: window.pwned = %s", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := js[int](t, ctx, `document.querySelectorAll("main img, main script, #runs-section svg").length`); n != 0 {
		t.Errorf("%d elements made from hostile content", n)
	}
	if v := js[[]string](t, ctx, `window.violations`); len(v) != 0 {
		t.Errorf("CSP violations: %v", v)
	}

	// refused without the token, and from another origin with it: nothing changes
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	if resp, err := client.Get(base); err == nil {
		resp.Body.Close()
	}
	var csrf string
	for _, c := range jar.Cookies(mustURL(t, base).URL) {
		if c.Name == "flowrun_csrf" {
			csrf = c.Value
		}
	}
	for _, c := range []struct {
		name, token, origin string
		want                int
	}{
		{"no token", "", strings.TrimSuffix(base, "/"), http.StatusUnauthorized},
		{"wrong token", "nope", strings.TrimSuffix(base, "/"), http.StatusUnauthorized},
		{"other origin", token, "http://evil.example", http.StatusForbidden},
	} {
		req, _ := http.NewRequest("POST", base+"api/workflows/order/runs/cancel", strings.NewReader(`{"id":"A-3"}`))
		req.Header.Set("X-CSRF-Token", csrf)
		req.Header.Set("Origin", c.origin)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != c.want || csrf == "" {
			t.Errorf("cancel, %s: %d %v, want %d", c.name, resp.StatusCode, out, c.want)
		}
	}
	if code, _ := httpGet(base + "api/workflows/order/runs/cancel?id=A-3"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET cancel: %d, want 405", code)
	}
	if s := status("A-3"); s != "running" {
		t.Fatalf("a refused cancel left A-3 %s", s)
	}

	// cancel with the token, on the page: the run in Redis is cancelled, the page follows
	findRun(t, ctx, "A-3")
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("run-token"), token), chromedp.Click(chromedp.ID("run-cancel"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the confirmation", `!document.getElementById("run-confirm").hidden`, `document.getElementById("run-admin").innerText`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("run-confirm-yes"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the cancel's result", `document.getElementById("run-result").textContent === "cancelled run A-3"`, `document.getElementById("run-result").textContent`)
	if s := status("A-3"); s != "cancelled" {
		t.Errorf("after cancel, A-3 is %q in Redis", s)
	}
	if n := e.rdb.ZScore(e.ctx, "flowrun:{order}:timeouts", "A-3\n2").Val(); n != 0 {
		t.Errorf("A-3's timeout is left: %v", n)
	}
	waitJS(t, ctx, 10*time.Second, "the page to follow", `document.getElementById("run-status").textContent === "cancelled" && `+
		runCount("by-status", "cancelled")+` === "1" && `+runCount("by-status", "running")+` === "1" && `+runCount("by-step", "approve")+` === "1"`,
		`document.getElementById("runs-section").innerText`)
	if got := js[string](t, ctx, `Array.from(document.querySelectorAll("#run-timeline li.event .outcome")).pop().textContent`); got != "cancelled" {
		t.Errorf("the timeline ends with %q", got)
	}

	// retry with the token: the failed run runs its failed step again (and fails again)
	histLen := func(id string) int64 { return e.rdb.LLen(e.ctx, "flowrun:{order}:hist:"+id).Val() }
	before := histLen("A-2")
	findRun(t, ctx, "A-2")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("run-retry"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the confirmation", `!document.getElementById("run-confirm").hidden`, `document.getElementById("run-admin").innerText`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("run-confirm-yes"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the retry's result", `document.getElementById("run-result").textContent === "retrying run A-2 at step check"`, `document.getElementById("run-result").textContent`)
	eventually(t, 20*time.Second, "A-2 to fail again after its retry", func() bool { return histLen("A-2") == before+2 && status("A-2") == "failed" })

	// usable at 360 px, with the hostile run (a long id, long values) shown
	findRun(t, ctx, hostileRunID)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(360, 740)); err != nil {
		t.Fatal(err)
	}
	if w := js[int](t, ctx, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the page is %d px wide", w)
	}
	if w := js[int](t, ctx, `Math.ceil(document.getElementById("run").getBoundingClientRect().right)`); w > 360 {
		t.Errorf("at 360 px the run reaches %d px", w)
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// findRun finds a run by its id through the page's form and waits until it is shown.
func findRun(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("run-id"), id), chromedp.Click(chromedp.ID("run-find-go"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "run "+id, fmt.Sprintf(`!document.getElementById("run").hidden && document.getElementById("run").dataset.run === %q && document.querySelectorAll("#run-timeline li.event").length > 0`, id),
		`document.getElementById("runs-section").innerText`)
}
