package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The status page's dead-letter view lives in the URL, times are UTC ISO 8601 with the local
// time on hover, and the dead-letter count follows a letter flowrun writes at once (issue 25).

// dlqView is what the dead-letter section shows: enough to tell two views apart.
const dlqView = `JSON.stringify({
  pipeline: document.getElementById("dlq-pipeline").value,
  order: document.getElementById("dlq-order").value,
  where: document.getElementById("dlq-where").value,
  summary: document.getElementById("dlq-summary").textContent,
  page: document.getElementById("dlq-page").textContent,
  refs: Array.from(document.querySelectorAll("#dlq-list details.letter")).map(d => d.dataset.ref),
  open: Array.from(document.querySelectorAll("#dlq-list details.letter[open]")).map(d => d.dataset.ref),
})`

func TestStatusViewInTheURL(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newInspEnv(t)
	cfg := e.config(statusPipelines)
	// 60 letters, two in three timeouts: a filter selects 40, two pages of them
	for i := 1; i <= 60; i++ {
		reason := "http 400: refused"
		if i%3 != 0 {
			reason = "http 504: timeout"
		}
		e.xadd("sp.orders.dlq", fmt.Sprintf("%d-1", i), "x-dead-letter-reason", reason, "x-original-key", "sp.orders",
			"x-attempts", "3", "x-failed-at", fmt.Sprintf("2026-11-30T22:%02d:05Z", i%60), "payload", fmt.Sprintf(`{"n":%d}`, i))
	}
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	base := "http://" + addr + "/"
	eventually(t, 10*time.Second, "the http server", func() bool { code, _ := httpGet(base + "healthz"); return code == 200 })
	if err := chromedp.Do(ctx, chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the first page of letters", `document.querySelectorAll("#dlq-list details.letter").length === 20`, dlqView)

	// a view: oldest first, a filter, the second page, the third letter on it open
	where := `reason contains "timeout"`
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("dlq-where"), where), chromedp.SetValue(chromedp.ID("dlq-order"), "oldest"),
		chromedp.Click(chromedp.ID("dlq-apply"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the filtered first page", `document.getElementById("dlq-page").textContent === "1–20 of 40, oldest first"`, dlqView)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("dlq-next"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the second page", `document.getElementById("dlq-page").textContent === "21–40 of 40, oldest first"`, dlqView)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#dlq-list details.letter:nth-child(3) summary`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the open letter in the URL", `location.search.includes("letter=")`, `location.href`)
	link := js[string](t, ctx, `location.href`)
	for _, want := range []string{"pipeline=orders", "order=oldest", "where=reason+contains+%22timeout%22", "offset=20", "letter=id%3A"} {
		if !strings.Contains(link, want) {
			t.Errorf("the URL %s lacks %s", link, want)
		}
	}
	before := js[string](t, ctx, dlqView)
	var v struct {
		Refs, Open []string
		Page       string
	}
	if err := json.Unmarshal([]byte(before), &v); err != nil || len(v.Refs) != 20 || len(v.Open) != 1 || v.Open[0] != v.Refs[2] {
		t.Fatalf("the view before: %s (%v)", before, err)
	}

	// the link in a fresh tab opens the same view
	tab, cancel := chromedp.NewContext(ctx)
	defer cancel()
	if err := chromedp.Do(tab, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, 10*time.Second, "the same view from the link", dlqView+` === `+jsString(before), dlqView)
	if got := js[string](t, tab, `location.href`); got != link {
		t.Errorf("the fresh tab's URL became %s, want %s", got, link)
	}

	// Back returns to the first page of the filter
	js[bool](t, ctx, `history.back(); true`)
	waitJS(t, ctx, 5*time.Second, "the first page again", `document.getElementById("dlq-page").textContent === "1–20 of 40, oldest first" && !location.search.includes("offset=")`, dlqView)

	// times: UTC ISO 8601 in the header and on letters, the local time on hover, no 12-hour clock
	iso := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
	waitJS(t, tab, 5*time.Second, "the header's time", `/^updated \d{4}-/.test(document.getElementById("updated").textContent)`, `document.getElementById("updated").textContent`)
	if got := js[string](t, tab, `document.getElementById("updated-at").textContent`); !iso.MatchString(got) {
		t.Errorf("header time %q, want UTC ISO 8601", got)
	}
	if got := js[string](t, tab, `document.getElementById("updated-at").title`); !strings.HasPrefix(got, "local time: ") {
		t.Errorf("header time's title %q", got)
	}
	at := js[string](t, tab, `document.querySelector("#dlq-list details.letter .failed-at").textContent`)
	title := js[string](t, tab, `document.querySelector("#dlq-list details.letter .failed-at").title`)
	if !iso.MatchString(at) || !strings.HasPrefix(title, "local time: ") {
		t.Errorf("a letter's time %q (title %q)", at, title)
	}
	if body := js[string](t, tab, `document.body.innerText`); regexp.MustCompile(`(?i)\d:\d\d(:\d\d)?\s*[ap]\.?m\b`).MatchString(body) {
		t.Errorf("a 12-hour time on the page:\n%s", body)
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The count on the page follows a dead letter flowrun writes at once, not at the next 15 s
// sample.
func TestStatusDeadLetterCountAtOnce(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(`
pipeline "pay" {
  source "stream" {
    stream = "dc.pay"
    group  = "g"
  }
  max_attempts = 1
  dead_letter  = "dc.pay.dlq"
  rule "refuse" { outcome = "retry" }
}
`)
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	base := "http://" + addr + "/"
	count := func() (int64, bool) {
		code, body := httpGet(base + "api/status")
		var st struct {
			Pipelines []struct {
				DeadLetters *int64     `json:"dead_letters"`
				SampledAt   *time.Time `json:"sampled_at"`
			}
		}
		if code != 200 || json.Unmarshal([]byte(body), &st) != nil || len(st.Pipelines) != 1 || st.Pipelines[0].DeadLetters == nil {
			return -1, false
		}
		return *st.Pipelines[0].DeadLetters, true
	}
	eventually(t, 15*time.Second, "the first sample", func() bool { n, ok := count(); return ok && n == 0 })

	for round, want := range []int64{4, 7} {
		began := time.Now()
		for i := int64(0); i < want-int64(round*4); i++ {
			e.xadd("dc.pay", "", "payload", "x")
		}
		deadline := began.Add(3 * time.Second)
		for {
			if n, _ := count(); n == want {
				break
			}
			if time.Now().After(deadline) {
				n, _ := count()
				xlen, _ := e.rdb.XLen(e.ctx, "dc.pay.dlq").Result()
				t.Fatalf("round %d: the count is %d %v after the letters (Redis holds %d), want %d", round, n, time.Since(began), xlen, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("round %d: the count showed %d letters %v after they were sent", round, want, time.Since(began).Round(time.Millisecond))
		if n, _ := e.rdb.XLen(e.ctx, "dc.pay.dlq").Result(); n != want {
			t.Errorf("Redis holds %d letters, the page %d", n, want)
		}
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
