package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
)

// The status page under attack (SPEC §15 "Hostile content", issue 26): markup in messages and
// files is shown as text and runs nothing; every response carries the security headers; a
// visitor's filters are refused quickly while the pipelines settle and /healthz answers.

// Names from the files that are markup: the page must show them as characters.
const (
	hostilePipeline = `<img src=x onerror="window.pwned='pipeline'">`
	hostileDLQ      = `dlq<script>window.pwned='dlq'</script>`
	hostileStream   = `<svg onload="window.pwned='stream'"></svg>`
)

func TestStatusHostileContentInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newInspEnv(t)
	cfg := e.config(fmt.Sprintf(`
pipeline %q {
  source "stream" {
    stream = %q
    group  = "g"
  }
  dead_letter = %q
  rule "all" { outcome = "ack" }
}
`, hostilePipeline, hostileStream, hostileDLQ))
	letters := []struct{ payload string }{
		{`<img src=x onerror="window.pwned='payload-img'">`},
		{`<script>window.pwned='payload-script'</script>`},
		{`<svg onload="window.pwned='payload-svg'"><circle r="9"/></svg>`},
		{`{"html":"<img src=x onerror=window.pwned='json'>","a":"</pre><script>window.pwned='pre'</script>"}`},
	}
	for i, l := range letters {
		e.xadd(hostileDLQ, fmt.Sprintf("%d-1", i+1),
			"x-dead-letter-reason", `<script>window.pwned='reason'</script>`,
			"x-original-key", `<img src=x onerror="window.pwned='key'">`,
			"x-failed-at", `<svg onload="window.pwned='time'">`,
			`<img src=x onerror="window.pwned='header-name'">`, `<svg onload="window.pwned='header-value'">`,
			"payload", l.payload)
	}
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, "--admin-token", "tok", cfg)
	base := "http://" + addr + "/"
	eventually(t, 10*time.Second, "the http server", func() bool { code, _ := httpGet(base + "healthz"); return code == 200 })

	// a link whose filter is markup, too
	link := base + "?where=" + url.QueryEscape(`<img src=x onerror="window.pwned='where'">`)
	if err := chromedp.Do(ctx, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	js[bool](t, ctx, `window.violations = []; document.addEventListener("securitypolicyviolation", (e) => window.violations.push(e.violatedDirective + " " + e.sample)); true`)
	waitJS(t, ctx, 10*time.Second, "the card and the filter's error",
		`document.querySelector(".card h3") !== null && !document.getElementById("dlq-error").hidden`, `document.body.innerText`)
	if got := js[string](t, ctx, `document.querySelector(".card h3").textContent`); got != hostilePipeline {
		t.Errorf("pipeline name shown as %q", got)
	}
	if got := js[string](t, ctx, `document.querySelector(".card code").textContent`); got != hostileStream {
		t.Errorf("source key shown as %q", got)
	}
	if got := js[string](t, ctx, `document.querySelector("#topology g.pipeline title").textContent`); got != "pipeline "+hostilePipeline {
		t.Errorf("topology node titled %q", got)
	}
	if got := js[string](t, ctx, `document.getElementById("dlq-error").textContent`); !strings.Contains(got, `<img src=x onerror="window.pwned='where'">`) {
		t.Errorf("the filter's error: %q", got)
	}

	// every letter, opened
	js[bool](t, ctx, `document.getElementById("dlq-where").value = ""; true`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("dlq-apply"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the four letters", `document.querySelectorAll("#dlq-list details.letter").length === 4`, `document.getElementById("dlq-section").innerText`)
	js[bool](t, ctx, `document.querySelectorAll("#dlq-list details.letter").forEach((d) => { d.open = true; }); true`)
	shown := js[[]string](t, ctx, `Array.from(document.querySelectorAll("#dlq-list details.letter pre")).map((p) => p.textContent)`)
	for i, l := range letters {
		want := l.payload
		if strings.HasPrefix(want, "{") {
			want = "{\n  \"html\": \"<img src=x onerror=window.pwned='json'>\",\n  \"a\": \"</pre><script>window.pwned='pre'</script>\"\n}"
		}
		if j := len(letters) - 1 - i; j >= len(shown) || shown[j] != want { // newest first
			t.Errorf("letter %d's payload shown as %q, want %q", i+1, shown, want)
		}
	}
	if got := js[string](t, ctx, `document.querySelector("#dlq-list details.letter .reason").textContent`); got != `<script>window.pwned='reason'</script>` {
		t.Errorf("reason shown as %q", got)
	}
	if got := js[string](t, ctx, `document.querySelector("#dlq-list details.letter table").innerText`); !strings.Contains(got, `<img src=x onerror="window.pwned='header-name'">`+"\t"+`<svg onload="window.pwned='header-value'">`) {
		t.Errorf("headers shown as %q", got)
	}
	// no element was made from a message or a name, nothing ran, and the CSP had nothing to
	// block: the page never tried. The images would have failed at once; allow a moment.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if got := js[string](t, ctx, `String(window.pwned)`); got != "undefined" {
			t.Fatalf("hostile content ran: window.pwned = %s", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := js[int](t, ctx, `document.querySelectorAll("main img, main script, #dlq-list svg, .cards svg, #topology svg svg, #topology circle").length`); n != 0 {
		t.Errorf("%d elements made from hostile content", n)
	}
	if v := js[[]string](t, ctx, `window.violations`); len(v) != 0 {
		t.Errorf("CSP violations: %v", v)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// vmHWM is a process's peak resident set, in bytes, from /proc/PID/status.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func TestStatusHostileFiltersWhileSettling(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(`
pipeline "work" {
  source "stream" {
    stream = "hf.work"
    group  = "g"
  }
  dead_letter = "hf.work.dlq"
  rule "all" { outcome = "ack" }
}
`)
	for i := 0; i < 50; i++ {
		e.xadd("hf.work.dlq", "", "x-dead-letter-reason", "boom", "payload", fmt.Sprintf(`{"n":%d}`, i))
	}
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	base := "http://" + addr + "/"
	eventually(t, 10*time.Second, "ready", func() bool { code, _ := httpGet(base + "readyz"); return code == 200 })

	// the security headers on every response of the process, errors included
	for _, path := range []string{"", "healthz", "readyz", "metrics", "nope", "api/status", "api/pipelines/work/dead-letters", "api/pipelines/work/dead-letters?where=nope(", "api/pipelines/none/dead-letters"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if h := resp.Header; h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("/%s (%d): headers %v", path, resp.StatusCode, h)
		}
	}

	const sent = 3000
	hostile := base + "api/pipelines/work/dead-letters?where=" + strings.Repeat("(", 100_000) + "true" + strings.Repeat(")", 100_000)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	var codes = map[int]int{}
	var slowest, slowestHealth time.Duration
	healthFailed := 0
	// the pipeline settles while it is attacked
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < sent; i += 100 {
			pipe := e.rdb.Pipeline()
			for j := 0; j < 100; j++ {
				pipe.XAdd(e.ctx, &redis.XAddArgs{Stream: "hf.work", Values: []string{"payload", strconv.Itoa(i + j)}})
			}
			if _, err := pipe.Exec(e.ctx); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 10; k++ {
				began := time.Now()
				resp, err := http.Get(hostile)
				took := time.Since(began)
				code := 0
				if err == nil {
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				codes[code]++
				slowest = max(slowest, took)
				mu.Unlock()
			}
		}()
	}
	healthDone := make(chan struct{})
	go func() {
		defer close(healthDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			began := time.Now()
			code, _ := httpGet(base + "healthz")
			mu.Lock()
			slowestHealth = max(slowestHealth, time.Since(began))
			if code != 200 {
				healthFailed++
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(stop)
	<-healthDone

	t.Logf("hostile filters: %v, the slowest answered in %v; /healthz at worst %v", codes, slowest, slowestHealth)
	for code, n := range codes {
		if code != http.StatusBadRequest && code != http.StatusTooManyRequests {
			t.Errorf("%d hostile filters answered %d, want 400 or 429", n, code)
		}
	}
	if slowest > time.Second {
		t.Errorf("a hostile filter took %v to refuse", slowest)
	}
	if healthFailed > 0 || slowestHealth > time.Second {
		t.Errorf("/healthz failed %d times, answered at worst in %v", healthFailed, slowestHealth)
	}
	// every entry settled: acknowledged, none pending
	eventually(t, 15*time.Second, "every entry acknowledged", func() bool {
		gs, err := e.rdb.XInfoGroups(e.ctx, "hf.work").Result()
		return err == nil && len(gs) == 1 && gs[0].EntriesRead == sent && gs[0].Pending == 0 && gs[0].Lag == 0
	})
	if hwm := vmHWM(t, p.cmd.Process.Pid); hwm > 200<<20 {
		t.Errorf("flowrun's peak RSS %d MiB, want < 200 MiB", hwm>>20)
	} else {
		t.Logf("flowrun's peak RSS: %.1f MiB", float64(hwm)/(1<<20))
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
