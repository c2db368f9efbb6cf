package e2e

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The status page shows a schedule pipeline's next tick on its card, in a real browser, and
// keeps it moving; a pipeline that reads a key shows none.
func TestScheduleNextTickOnStatusPage(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	e := newRedisEnv(t)
	cfg := e.schedConfig("a", schedPipeline("a", "")+`
pipeline "plain" {
  source "list" {
    key = "sched.plain"
  }
  rule "all" { outcome = "ack" }
}
`)
	addr := freeAddr(t)
	start(t, "run", "--http-addr", addr, cfg)
	base := "http://" + addr + "/"
	eventually(t, 10*time.Second, "the http server", func() bool { code, _ := httpGet(base + "healthz"); return code == 200 })
	if err := chromedp.Do(ctx, chromedp.Navigate(base)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 15*time.Second, "the tick card", cardText("tick", "tick")+` !== undefined && `+cardText("tick", "tick")+` !== ""`,
		`document.getElementById("pipelines").innerText`)
	first := js[string](t, ctx, cardText("tick", "tick"))
	tick, err := time.Parse(time.RFC3339, first)
	if err != nil || time.Until(tick) > 2*time.Second || time.Since(tick) > 5*time.Second {
		t.Fatalf("next tick shown as %q (%v), want a second from now", first, err)
	}
	if hidden := js[bool](t, ctx, `document.querySelector('.card[data-pipeline="tick"] [data-f="tickrow"]').hidden`); hidden {
		t.Error("the next tick is hidden")
	}
	if hidden := js[bool](t, ctx, `document.querySelector('.card[data-pipeline="plain"] [data-f="tickrow"]').hidden`); !hidden {
		t.Error("a list pipeline shows a next tick")
	}
	// the page refreshes itself: a later tick shows without a reload
	waitJS(t, ctx, 15*time.Second, "a later tick", cardText("tick", "tick")+` > "`+first+`"`, cardText("tick", "tick"))
}
