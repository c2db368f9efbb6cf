package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The status page (SPEC §15) in a real browser: headless Debian chromium, driven by chromedp,
// against the built binary and a real redis-server.

const statusPipelines = `
pipeline "orders" {
  source "stream" {
    stream = "sp.orders"
    group  = "g"
  }
  max_attempts = 1
  dead_letter  = "sp.orders.dlq"
  rule "refused" {
    when    = "payload.amount < 0"
    outcome = "retry"
  }
  rule "ship" {
    outcome = "ack"
    emit "list" {
      key     = "sp.shipping"
      payload = "payload"
    }
  }
}

pipeline "shipping" {
  source "list" {
    key = "sp.shipping"
  }
  dead_letter = "sp.shipping.dlq"
  rule "all" { outcome = "ack" }
}
`

// chromiumPath finds Debian's chromium; a test that needs it fails without it, naming it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: install it (Debian: apt-get install chromium); scripts/test.sh does so when run as root")
	return ""
}

// browser starts headless chromium for the test and returns its tab's context.
func browser(t *testing.T) context.Context {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 900),
	)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	return ctx
}

// js evaluates an expression in the page.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS polls a boolean expression in the page until it holds; on a timeout it shows what
// show evaluates to.
func waitJS(t *testing.T, ctx context.Context, timeout time.Duration, what, expr, show string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](show))
			t.Fatalf("timed out after %v waiting for %s (%v); page shows: %s", timeout, what, err, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cardText is the expression for a number on a pipeline's card.
func cardText(pipeline, field string) string {
	return fmt.Sprintf(`(document.querySelector('.card[data-pipeline=%q] [data-f=%q]')||{}).textContent`, pipeline, field)
}

func cardOutcome(pipeline, outcome string) string {
	return fmt.Sprintf(`(document.querySelector('.card[data-pipeline=%q] tr[data-outcome=%q] td:nth-child(2)')||{}).textContent`, pipeline, outcome)
}

func TestStatusPageInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newInspEnv(t)
	cfg := e.config(statusPipelines)
	// letters of an earlier run: two timeouts that will go through now, one refused order
	for i, l := range []struct{ reason, payload string }{
		{"http 504: timeout", `{"order":"A-1","amount":10}`},
		{"http 400: bad currency", `{"order":"A-2","amount":30,"currency":"XXX"}`},
		{"http 504: timeout", `{"order":"A-3","amount":20}`},
	} {
		e.xadd("sp.orders.dlq", fmt.Sprintf("%d-1", i+1), "x-dead-letter-reason", l.reason, "x-original-key", "sp.orders",
			"x-original-id", fmt.Sprintf("%d-0", i+1), "x-attempts", "3", "x-failed-at", "2026-11-30T22:14:0"+fmt.Sprint(i)+"Z", "payload", l.payload)
	}
	// this run: four orders that ship, two refused (dead-lettered at once, max_attempts 1)
	for _, amount := range []int{12, 7, -5, 40, -1, 3} {
		e.xadd("sp.orders", "", "payload", fmt.Sprintf(`{"amount":%d}`, amount))
	}
	const token = "t0ken-for-the-test"
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, "--admin-token", token, cfg)
	base := "http://" + addr + "/"
	eventually(t, 10*time.Second, "the http server", func() bool { code, _ := httpGet(base + "healthz"); return code == 200 })

	if err := chromedp.Do(ctx, chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	js[bool](t, ctx, `window.notReloaded = true`)

	// every pipeline, with the numbers Redis holds
	waitJS(t, ctx, 15*time.Second, "five dead letters and four shipped on the page",
		cardText("orders", "dead")+` === "5" && `+cardOutcome("orders", "ack")+` === "4" && `+cardOutcome("shipping", "ack")+` === "4"`,
		`document.getElementById("pipelines").innerText`)
	if n, _ := e.rdb.XLen(e.ctx, "sp.orders.dlq").Result(); n != 5 {
		t.Fatalf("Redis holds %d dead letters, the page 5", n)
	}
	for expr, want := range map[string]string{
		cardText("orders", "state"):                                         "running",
		cardText("orders", "kind"):                                          "stream",
		cardText("orders", "key"):                                           "sp.orders",
		cardText("orders", "lag"):                                           "0",
		cardText("orders", "pending"):                                       "0",
		cardOutcome("orders", "dead_letter"):                                "2",
		cardText("shipping", "state"):                                       "running",
		cardText("shipping", "kind"):                                        "list",
		cardText("shipping", "dead"):                                        "0",
		`document.querySelectorAll("#topology svg g.pipeline").length + ""`: "2",
		`document.querySelector('#topology svg g.pipeline[data-pipeline="orders"]').classList + ""`: "node pipeline running",
	} {
		if got := js[string](t, ctx, expr); got != want {
			t.Errorf("%s = %q, want %q", expr, got, want)
		}
	}

	// the dead letters, newest first, whole
	waitJS(t, ctx, 5*time.Second, "the letters of orders", `document.querySelectorAll("#dlq-list details.letter").length === 5`, `document.getElementById("dlq-section").innerText`)
	// a filter that does not compile says where
	bad := `reason contains "timeout" && paylod.amount > 5`
	col := strings.Index(bad, "paylod") + 1
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("dlq-where"), bad), chromedp.Click(chromedp.ID("dlq-apply"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the filter's error", `!document.getElementById("dlq-error").hidden`, `document.getElementById("dlq-error").textContent`)
	if got := js[string](t, ctx, `document.getElementById("dlq-error").textContent`); !strings.Contains(got, fmt.Sprintf(`where: 1:%d: unknown name "paylod"`, col)) || !strings.Contains(got, "\n"+bad+"\n"+strings.Repeat(" ", col-1)+"^") {
		t.Errorf("filter error:\n%s", got)
	}
	// a filter narrows them
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("dlq-where"), `reason contains "timeout" && payload.amount > 5`), chromedp.Click(chromedp.ID("dlq-apply"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "two letters matching", `document.querySelectorAll("#dlq-list details.letter").length === 2 && document.getElementById("dlq-error").hidden`, `document.getElementById("dlq-section").innerText`)
	if got := js[string](t, ctx, `document.getElementById("dlq-summary").textContent`); got != "2 dead letters matching in sp.orders.dlq" {
		t.Errorf("summary %q", got)
	}
	if got := js[string](t, ctx, `Array.from(document.querySelectorAll("#dlq-list details.letter")).map(d => d.dataset.ref).join(" ")`); got != "id:3-1 id:1-1" {
		t.Errorf("matching letters, newest first: %s", got)
	}
	// opened, a letter shows its headers and its payload pretty-printed
	js[bool](t, ctx, `document.querySelector("#dlq-list details.letter").open = true`)
	if got := js[string](t, ctx, `document.querySelector("#dlq-list details.letter pre").textContent`); got != "{\n  \"order\": \"A-3\",\n  \"amount\": 20\n}" {
		t.Errorf("payload shown as %q", got)
	}
	if got := js[string](t, ctx, `document.querySelector("#dlq-list details.letter table").innerText`); !strings.Contains(got, "x-original-id\t3-0") || !strings.Contains(got, "x-dead-letter-reason\thttp 504: timeout") {
		t.Errorf("headers shown as %q", got)
	}
	if os.Getenv("FLOWRUN_UPDATE_SCREENSHOT") == "1" {
		js[bool](t, ctx, `document.getElementById("admin-token").value = "••••"; true`)
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", "status-page.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
		js[bool](t, ctx, `document.getElementById("admin-token").value = ""; true`)
	}

	// a POST without the token changes nothing, even with the CSRF cookie and header
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
	for _, action := range []string{"redrive", "purge"} {
		req, _ := http.NewRequest("POST", base+"api/pipelines/orders/dead-letters/"+action, strings.NewReader(`{"all": true}`))
		req.Header.Set("X-CSRF-Token", csrf)
		req.Header.Set("Origin", strings.TrimSuffix(base, "/"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || csrf == "" {
			t.Errorf("%s without the token: %d %v (csrf %q), want 401", action, resp.StatusCode, out, csrf)
		}
	}
	if n, _ := e.rdb.XLen(e.ctx, "sp.orders.dlq").Result(); n != 5 {
		t.Fatalf("a POST without the token left %d dead letters, want 5", n)
	}
	if n, _ := e.rdb.XLen(e.ctx, "sp.orders").Result(); n != 6 {
		t.Fatalf("a POST without the token left %d entries in the source, want 6", n)
	}

	// with the token, the page redrives what the filter selects, and says so
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("admin-token"), token), chromedp.Click(chromedp.ID("redrive-all"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the confirmation", `!document.getElementById("confirm").hidden`, `document.getElementById("dlq-admin").innerText`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("confirm-yes"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the action's result", `document.getElementById("action-result").textContent === "2 redriven to sp.orders"`, `document.getElementById("action-result").textContent`)
	left := e.xrange("sp.orders.dlq")
	if len(left) != 3 || left[0]["x-dead-letter-reason"] != "http 400: bad currency" {
		t.Errorf("dead letters left: %v", left)
	}
	src := e.xrange("sp.orders")
	if len(src) != 8 || src[6]["payload"] != `{"order":"A-1","amount":10}` || src[7]["payload"] != `{"order":"A-3","amount":20}` || src[6]["x-dead-letter-reason"] != "" || src[6]["x-retry-count"] != "" {
		t.Errorf("the source after the redrive: %v", src)
	}
	// the numbers follow without a reload: the letters went through, three are left
	waitJS(t, ctx, 10*time.Second, "the counts to follow",
		cardText("orders", "dead")+` === "3" && `+cardOutcome("orders", "ack")+` === "6" && `+cardOutcome("shipping", "ack")+` === "6"`,
		`document.getElementById("pipelines").innerText`)
	if !js[bool](t, ctx, `window.notReloaded === true`) {
		t.Errorf("the page reloaded")
	}

	// a selected letter purged: the newest of the three left, ticked on the page
	js[bool](t, ctx, `document.getElementById("dlq-where").value = ""; true`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("dlq-apply"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the three letters left", `document.querySelectorAll("#dlq-list details.letter").length === 3`, `document.getElementById("dlq-section").innerText`)
	newest := js[string](t, ctx, `document.querySelector("#dlq-list details.letter").dataset.ref`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#dlq-list details.letter input.pick")), chromedp.Click(chromedp.ID("purge-selected"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the confirmation", `!document.getElementById("confirm").hidden`, `document.getElementById("dlq-admin").innerText`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("confirm-yes"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the purge's result", `document.getElementById("action-result").textContent === "1 purged from sp.orders.dlq"`, `document.getElementById("action-result").textContent`)
	ids := e.xids("sp.orders.dlq")
	if len(ids) != 2 || "id:"+ids[0] == newest || "id:"+ids[1] == newest || newest == "" {
		t.Errorf("after purging %s: %v left", newest, ids)
	}
	waitJS(t, ctx, 10*time.Second, "the count to follow", cardText("orders", "dead")+` === "2"`, `document.getElementById("pipelines").innerText`)

	// usable at 360 px: nothing wider than the screen but the topology, which scrolls
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(360, 740)); err != nil {
		t.Fatal(err)
	}
	if w := js[int](t, ctx, `document.documentElement.scrollWidth`); w > 360 {
		t.Errorf("at 360 px the page is %d px wide", w)
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func mustURL(t *testing.T, s string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// statusOf reads /api/status: each pipeline's state, and whether actions are enabled.
func statusOf(t *testing.T, base string) (map[string]string, bool) {
	t.Helper()
	code, body := httpGet(base + "api/status")
	if code != 200 {
		return nil, false
	}
	var st struct {
		Admin     bool `json:"admin"`
		Pipelines []struct{ Name, State string }
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("api/status: %v\n%s", err, body)
	}
	states := map[string]string{}
	for _, p := range st.Pipelines {
		states[p.Name] = p.State
	}
	return states, st.Admin
}

// A pipeline whose Redis is down is "waiting for Redis" until it is back; without a token the
// page is read-only; FLOWRUN_ADMIN_TOKEN enables the actions as --admin-token does.
func TestStatusWaitingReadOnlyAndEnvToken(t *testing.T) {
	e := newInspEnv(t)
	cfg := e.config(statusPipelines)
	e.srv.Stop()

	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	base := "http://" + addr + "/"
	eventually(t, 10*time.Second, "both pipelines waiting for Redis", func() bool {
		s, _ := statusOf(t, base)
		return s["orders"] == "waiting for Redis" && s["shipping"] == "waiting for Redis"
	})
	e.srv.Restart(t)
	e.xadd("sp.orders.dlq", "1-1", "x-dead-letter-reason", "boom", "payload", "x")
	eventually(t, 15*time.Second, "both pipelines running", func() bool {
		s, _ := statusOf(t, base)
		return s["orders"] == "running" && s["shipping"] == "running"
	})
	if _, admin := statusOf(t, base); admin {
		t.Errorf("admin enabled without a token")
	}
	if _, page := httpGet(base); !strings.Contains(page, `data-admin="off"`) {
		t.Errorf("the page is not read-only:\n%s", page)
	}
	req, _ := http.NewRequest("POST", base+"api/pipelines/orders/dead-letters/purge", strings.NewReader(`{"all": true}`))
	req.Header.Set("Authorization", "Bearer anything")
	req.Header.Set("X-CSRF-Token", "c")
	req.AddCookie(&http.Cookie{Name: "flowrun_csrf", Value: "c"})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("purge on a read-only page: %d, want 403", resp.StatusCode)
	}
	if n, _ := e.rdb.XLen(e.ctx, "sp.orders.dlq").Result(); n != 1 {
		t.Errorf("a read-only page purged: %d letters left", n)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}

	t.Setenv("FLOWRUN_ADMIN_TOKEN", "from-the-env")
	addr = freeAddr(t)
	p = start(t, "run", "--http-addr", addr, cfg)
	base = "http://" + addr + "/"
	eventually(t, 10*time.Second, "admin enabled by FLOWRUN_ADMIN_TOKEN", func() bool {
		_, admin := statusOf(t, base)
		return admin
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
