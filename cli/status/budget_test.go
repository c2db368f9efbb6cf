package status

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/rules"
)

// A visitor's filter is answered 400 naming the limit it hit, before it is parsed where the
// limit is static (SPEC §15 "Hostile content").
func TestFilterBudgetRefusals(t *testing.T) {
	f := newFixture(t, "")
	f.seed()
	for _, c := range []struct{ where, want string }{
		{strings.Repeat("(", 100_000) + "true" + strings.Repeat(")", 100_000), "over the limit of 4 KiB (4096 bytes)"},
		{`reason == "` + strings.Repeat("x", 4100) + `"`, "over the limit of 4 KiB"},
		{strings.Repeat("(", 40) + "true" + strings.Repeat(")", 40), "nested deeper than the limit of 32 levels (at 1:33)"},
		{`repeat("` + strings.Repeat("x", 4000) + `", 999999) != ""`, `"repeat" at 1:1 is not allowed`},
		{`let a = raw + raw; a != ""`, `"let" at 1:1 is not allowed`},
		{"reason == 'x' ||\n  len(map(1..10, raw)) > 0", `"map" at 2:7 is not allowed`},
		{`replace(raw, "", raw) != ""`, `"replace"`},
		{`reduce(1..10, #acc + raw, "") != ""`, `"reduce"`},
		{`count(1..200000, # > 0) > 0`, "more memory than its budget of 100000 expr-lang units"},
	} {
		var out errorJSON
		code := f.get("/api/pipelines/pay/dead-letters?where="+url.QueryEscape(c.where), &out)
		if code != http.StatusBadRequest || !strings.Contains(out.Error, c.want) {
			short := c.where
			if len(short) > 60 {
				short = short[:60] + "…"
			}
			t.Errorf("where %s: %d %q, want 400 with %q", short, code, out.Error, c.want)
		}
	}
	// within the limits: brackets in strings and member names that look like refused words
	for _, where := range []string{
		`reason == "((((((((((((((((((((((((((((((((((((((((" || payload.map == 1 || headers.let == "x"`,
		strings.Repeat("(", 32) + "true" + strings.Repeat(")", 32),
		`count(1..1000, # > 0) > 0 && reason contains "http"`,
	} {
		var out lettersJSON
		if code := f.get("/api/pipelines/pay/dead-letters?where="+url.QueryEscape(where), &out); code != 200 {
			t.Errorf("where %s: %d, want 200", where, code)
		}
	}
}

func TestFilterSlots(t *testing.T) {
	s := filterSlots()
	req := func(addr string) *http.Request { return &http.Request{RemoteAddr: addr} }
	release, err := s.take(req("10.0.0.1:4000"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.take(req("10.0.0.1:4001")); err == nil || !strings.Contains(err.Error(), "one at a time per client") {
		t.Errorf("a second filter from the same address: %v", err)
	}
	var more []func()
	for _, a := range []string{"10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"} {
		r, err := s.take(req(a))
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		more = append(more, r)
	}
	if _, err := s.take(req("10.0.0.5:1")); err == nil || !strings.Contains(err.Error(), "4 filters are running") {
		t.Errorf("a fifth filter at once: %v", err)
	}
	release()
	if r, err := s.take(req("10.0.0.1:4002")); err != nil {
		t.Errorf("after the release: %v", err)
	} else {
		r()
	}
	for _, r := range more {
		r()
	}
}

// A filter past its time ends the walk; the request is answered 400 naming the limit.
func TestFilterTimeEndsTheWalk(t *testing.T) {
	fl, err := rules.CompileFilter(`reason != ""`)
	if err != nil {
		t.Fatal(err)
	}
	c := &countingFilter{f: fl, deadline: time.Now().Add(-time.Millisecond)}
	if _, err := c.match(&engine.Message{Headers: map[string]string{"x-dead-letter-reason": "x"}}); !errors.Is(err, errFilterTime) {
		t.Fatalf("match past the deadline: %v", err)
	}
	if !strings.Contains(errFilterTime.Error(), "limit of 2s") {
		t.Errorf("the time limit's message: %v", errFilterTime)
	}
}

// Every response carries the security headers: the page, assets, the JSON API, its errors.
func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	f := newFixture(t, "tok")
	for _, c := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/assets/status.js"}, {"GET", "/graph.svg"}, {"GET", "/api/status"},
		{"GET", "/api/pipelines/pay/dead-letters"}, {"GET", "/api/pipelines/pay/dead-letters?where=nope("},
		{"GET", "/api/pipelines/nope/dead-letters"}, {"GET", "/nope"}, {"GET", "/api/pipelines/pay/dead-letters/purge"},
		{"POST", "/api/pipelines/pay/dead-letters/purge"}, {"POST", "/api/status"},
	} {
		req, _ := http.NewRequest(c.method, f.srv.URL+c.path, strings.NewReader(`{"all":true}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("%s %s (%d): headers %v", c.method, c.path, resp.StatusCode, h)
		}
		if c.method == "GET" && strings.HasSuffix(c.path, "/purge") && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("GET of an action: %d, want 405", resp.StatusCode)
		}
	}
	if n := len(f.ids("st.pay.dlq")); n != 0 {
		t.Errorf("%d letters appeared", n)
	}
}
