package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports"
	_ "github.com/flowrun/flowrun/transports/builtin"
)

// The API behind the page, against a real redis-server and the real dead-letter stores; only
// the engine's and the sampler's numbers are given by the test.

const testConfig = `
redis "main" {
  url = %q
}

pipeline "pay" {
  source "stream" {
    stream = "st.pay"
    group  = "g"
  }
  dead_letter = "st.pay.dlq"
  rule "all" { outcome = "ack" }
}

pipeline "jobs" {
  source "list" {
    key = "st.jobs"
  }
  dead_letter = "st.jobs.dlq"
  rule "all" {
    outcome = "ack"
    emit "stream" {
      key     = "st.pay"
      payload = "payload"
    }
  }
}

pipeline "plain" {
  source "list" {
    key = "st.plain"
  }
  rule "all" { outcome = "ack" }
}
`

type fixture struct {
	t       *testing.T
	rdb     *redis.Client
	srv     *httptest.Server
	refresh int
}

func newFixture(t *testing.T, token string) *fixture {
	t.Helper()
	rs := redistest.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "flow.hcl")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(testConfig, rs.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load([]string{path}, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	f := &fixture{t: t, rdb: rs.Client(t)}
	lag, pending, dead := int64(7), int64(2), int64(5)
	idle := 1500 * time.Millisecond
	f.srv = httptest.NewServer(Handler(Options{
		Pipelines: func() []*config.Pipeline { return cfg.Pipelines },
		Engine: func() []engine.PipelineStatus {
			return []engine.PipelineStatus{{
				Name: "pay", State: engine.StateWaiting, Started: time.Now(), Rate: 2.5,
				Rates: map[string]float64{"ack": 2.5}, Totals: map[string]int64{"ack": 150, "dead_letter": 5},
				Inflight: 3, Held: 1,
			}}
		},
		Stats: func(p string) (transports.Stats, time.Time, bool) {
			if p != "pay" {
				return transports.Stats{}, time.Time{}, false
			}
			return transports.Stats{Key: "st.pay", Lag: &lag, LagBound: &lag, Pending: &pending, OldestPendingIdle: &idle, DeadLetters: &dead, DeadLetter: "st.pay.dlq"}, time.Now(), true
		},
		Refresh: func() { f.refresh++ },
		Env: func(block string) *transports.Env {
			return &transports.Env{Logger: zerolog.Nop(), RedisBlock: block, Redis: func(string) (redis.UniversalClient, error) { return f.rdb, nil }}
		},
		Graph: func() Graph {
			return Graph{
				Nodes: []Node{{ID: "p_pay", Label: "pay", Pipeline: true}, {ID: "k_st_pay", Label: "st.pay"}, {ID: "k_dlq", Label: "st.pay.dlq"}},
				Edges: []Edge{{From: "k_st_pay", To: "p_pay", Label: "stream"}, {From: "p_pay", To: "k_dlq", Label: "dead letter"}},
			}
		},
		AdminToken:  token,
		SampleEvery: 15 * time.Second,
		Logger:      zerolog.Nop(),
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// seed writes five stream letters (1-1 … 5-1, amount = n, reason "http 500" for even n) and
// three list letters, two of them alike.
func (f *fixture) seed() {
	ctx := context.Background()
	for n := 1; n <= 5; n++ {
		reason := "http 400"
		if n%2 == 0 {
			reason = "http 500"
		}
		err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "st.pay.dlq", ID: fmt.Sprintf("%d-1", n), Values: []string{
			"x-dead-letter-reason", reason, "x-original-key", "st.pay", "x-attempts", "3",
			"x-failed-at", "2030-01-01T00:00:00Z", "payload", fmt.Sprintf(`{"amount":%d}`, n),
		}}).Err()
		if err != nil {
			f.t.Fatal(err)
		}
	}
	same := `{"headers":{"x-dead-letter-reason":"boom","x-original-key":"st.jobs"},"payload":{"n":1}}`
	if err := f.rdb.LPush(ctx, "st.jobs.dlq", same, same, `{"headers":{"x-dead-letter-reason":"bang"},"payload":"two"}`).Err(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) get(path string, into any) int {
	f.t.Helper()
	resp, err := http.Get(f.srv.URL + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			f.t.Fatalf("GET %s: %v\n%s", path, err, b)
		}
	}
	return resp.StatusCode
}

// post sends an action; csrf "" sends no CSRF cookie and header.
func (f *fixture) post(path, token, csrf, origin, body string) (int, map[string]any) {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if csrf != "" {
		req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
		req.Header.Set(csrfHeader, csrf)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (f *fixture) ids(key string) []string {
	f.t.Helper()
	xs, err := f.rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	var ids []string
	for _, x := range xs {
		ids = append(ids, x.ID)
	}
	return ids
}

func TestAPIStatus(t *testing.T) {
	f := newFixture(t, "")
	var st statusJSON
	if code := f.get("/api/status", &st); code != 200 {
		t.Fatalf("status %d", code)
	}
	if st.Admin || len(st.Pipelines) != 3 || st.SampleEveryS != 15 || st.GraphSignature == "" {
		t.Fatalf("status = %+v", st)
	}
	byName := map[string]pipelineJSON{}
	for _, p := range st.Pipelines {
		byName[p.Name] = p
	}
	pay := byName["pay"]
	if pay.Source.Kind != "stream" || pay.Source.Key != "st.pay" || pay.State != "waiting for Redis" ||
		pay.Totals["ack"] != 150 || pay.Rate != 2.5 || pay.Inflight != 3 || pay.Held != 1 ||
		*pay.Lag != 7 || *pay.Pending != 2 || *pay.OldestPendingMS != 1500 || *pay.DeadLetters != 5 ||
		pay.Delayed != nil || pay.DeadLetterKey != "st.pay.dlq" || !pay.DeadLetterAccess || pay.SampledAt == nil {
		t.Errorf("pay = %+v", pay)
	}
	jobs := byName["jobs"]
	if jobs.State != "stopped" || jobs.Source.Kind != "list" || jobs.Source.Key != "st.jobs" || jobs.Lag != nil || jobs.SampledAt != nil || !jobs.DeadLetterAccess {
		t.Errorf("jobs (not running, not sampled) = %+v", jobs)
	}
	if byName["plain"].DeadLetterAccess {
		t.Errorf("plain has no dead_letter, yet browsable")
	}
}

func TestAPIDeadLettersOrderPagingFilter(t *testing.T) {
	f := newFixture(t, "")
	f.seed()
	idsOf := func(l lettersJSON) string {
		var s []string
		for _, x := range l.Letters {
			s = append(s, x.ID)
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		query, want string
		total       int64
	}{
		{"", "5-1 4-1 3-1 2-1 1-1", 5},
		{"?limit=2", "5-1 4-1", 5},
		{"?limit=2&offset=2", "3-1 2-1", 5},
		{"?limit=2&offset=4", "1-1", 5},
		{"?order=oldest&limit=2", "1-1 2-1", 5},
		{"?order=oldest&limit=2&offset=3", "4-1 5-1", 5},
		{"?where=" + urlq(`reason == "http 500"`), "4-1 2-1", 2},
		{"?order=oldest&limit=1&offset=1&where=" + urlq(`payload.amount >= 2`), "3-1", 4},
		{"?offset=9", "", 5},
	} {
		var l lettersJSON
		if code := f.get("/api/pipelines/pay/dead-letters"+c.query, &l); code != 200 {
			t.Fatalf("%s: status %d", c.query, code)
		}
		if got := idsOf(l); got != c.want || l.Total != c.total {
			t.Errorf("%s: letters %q of %d, want %q of %d", c.query, got, l.Total, c.want, c.total)
		}
	}

	var l lettersJSON
	f.get("/api/pipelines/pay/dead-letters?limit=1", &l)
	one := l.Letters[0]
	if one.Ref != "id:5-1" || one.Key != "st.pay" || one.Reason != "http 400" || one.Attempts != "3" ||
		one.FailedAt != "2030-01-01T00:00:00Z" || one.Payload != `{"amount":5}` || one.JSON != "{\n  \"amount\": 5\n}" ||
		one.Headers["x-original-key"] != "st.pay" {
		t.Errorf("letter = %+v", one)
	}

	// a list's letters have no id: a ref by content, and a text payload is not pretty-printed
	f.get("/api/pipelines/jobs/dead-letters?order=oldest", &l)
	if len(l.Letters) != 3 || l.Letters[0].Payload != `{"n":1}` || l.Letters[2].Payload != "two" || l.Letters[2].JSON != "" ||
		!strings.HasPrefix(l.Letters[0].Ref, "sha256:") || l.Letters[0].Ref != l.Letters[1].Ref || l.Letters[0].Ref == l.Letters[2].Ref {
		t.Errorf("list letters = %+v", l.Letters)
	}

	// pages of a list, both ways
	f.get("/api/pipelines/jobs/dead-letters?limit=1&offset=2", &l)
	if l.Total != 3 || len(l.Letters) != 1 || l.Letters[0].Payload != `{"n":1}` {
		t.Errorf("newest first, third: %+v", l)
	}
	f.get("/api/pipelines/jobs/dead-letters?order=oldest&limit=2&offset=1", &l)
	if l.Total != 3 || len(l.Letters) != 2 || l.Letters[0].Payload != `{"n":1}` || l.Letters[1].Payload != "two" {
		t.Errorf("oldest first, second and third: %+v", l)
	}
	f.get("/api/pipelines/jobs/dead-letters?limit=2", &l)
	if len(l.Letters) != 2 || l.Letters[0].Payload != "two" || l.Letters[0].Reason != "bang" {
		t.Errorf("newest first: %+v", l)
	}

	// a filter that does not compile: its position in the expression
	var we whereErrorJSON
	if code := f.get("/api/pipelines/pay/dead-letters?where="+urlq(`reason == "x" && paylod.a`), &we); code != 400 ||
		we.Line != 1 || we.Column != 18 || !strings.Contains(we.Error, `unknown name "paylod"`) {
		t.Errorf("bad filter: %d %+v", code, we)
	}
	// a filter that fails on some letters: they do not match, and are counted
	f.get("/api/pipelines/jobs/dead-letters?where="+urlq(`payload.n == 1`), &l)
	if l.Total != 2 || l.Failed != 1 || l.FailedFirst == "" {
		t.Errorf("failing filter: total %d, failed %d (%q)", l.Total, l.Failed, l.FailedFirst)
	}
	var e errorJSON
	for path, want := range map[string]int{
		"/api/pipelines/nope/dead-letters":          404,
		"/api/pipelines/plain/dead-letters":         404,
		"/api/pipelines/pay/dead-letters?order=new": 400,
		"/api/pipelines/pay/dead-letters?limit=0":   400,
	} {
		if code := f.get(path, &e); code != want || e.Error == "" {
			t.Errorf("%s: %d %q, want %d with an error", path, code, e.Error, want)
		}
	}
}

func urlq(s string) string {
	return strings.NewReplacer("%", "%25", " ", "%20", "&", "%26", "=", "%3D", `"`, "%22", ">", "%3E", "+", "%2B").Replace(s)
}

func TestAPIActionsRefusedWithoutTokenOrCSRF(t *testing.T) {
	all := `{"all": true}`
	t.Run("read-only", func(t *testing.T) {
		f := newFixture(t, "")
		f.seed()
		code, out := f.post("/api/pipelines/pay/dead-letters/redrive", "any", "c", "", all)
		if code != 403 || !strings.Contains(fmt.Sprint(out["error"]), "--admin-token") {
			t.Errorf("redrive on a read-only page: %d %v", code, out)
		}
		if code, _ := f.post("/api/pipelines/pay/dead-letters/purge", "any", "c", "", all); code != 403 {
			t.Errorf("purge on a read-only page: %d", code)
		}
		if n := len(f.ids("st.pay.dlq")); n != 5 || len(f.ids("st.pay")) != 0 {
			t.Errorf("read-only page changed Redis: %d letters left", n)
		}
	})
	t.Run("token", func(t *testing.T) {
		f := newFixture(t, "s3cret")
		f.seed()
		for _, c := range []struct {
			name, token, csrf, origin string
			want                      int
		}{
			{"no token", "", "c", "", 401},
			{"wrong token", "nope", "c", "", 401},
			{"no csrf", "s3cret", "", "", 403},
			{"other origin", "s3cret", "c", "http://evil.example", 403},
		} {
			code, out := f.post("/api/pipelines/pay/dead-letters/redrive", c.token, c.csrf, c.origin, all)
			if code != c.want {
				t.Errorf("%s: %d %v, want %d", c.name, code, out, c.want)
			}
			if code, _ := f.post("/api/pipelines/pay/dead-letters/purge", c.token, c.csrf, c.origin, all); code != c.want {
				t.Errorf("%s: purge %d, want %d", c.name, code, c.want)
			}
		}
		if n := len(f.ids("st.pay.dlq")); n != 5 || len(f.ids("st.pay")) != 0 || f.refresh != 0 {
			t.Errorf("refused actions changed Redis: %d letters left", n)
		}
	})
}

func TestAPIRedriveAndPurge(t *testing.T) {
	f := newFixture(t, "s3cret")
	f.seed()
	origin := f.srv.URL
	post := func(path, body string) map[string]any {
		t.Helper()
		code, out := f.post(path, "s3cret", "c", origin, body)
		if code != 200 {
			t.Fatalf("POST %s %s: %d %v", path, body, code, out)
		}
		return out
	}
	// selected letters
	out := post("/api/pipelines/pay/dead-letters/redrive", `{"refs": ["id:2-1", "id:5-1"]}`)
	if out["count"] != 2.0 || out["target"] != "st.pay" || out["message"] != "2 redriven to st.pay" {
		t.Errorf("redrive selected: %v", out)
	}
	if got := strings.Join(f.ids("st.pay.dlq"), " "); got != "1-1 3-1 4-1" || len(f.ids("st.pay")) != 2 || f.refresh != 1 {
		t.Errorf("after redrive of 2-1 and 5-1: dlq %s, source %d", got, len(f.ids("st.pay")))
	}
	// all matching a filter
	out = post("/api/pipelines/pay/dead-letters/purge", `{"all": true, "where": "payload.amount > 2"}`)
	if out["count"] != 2.0 || out["message"] != "2 purged from st.pay.dlq" {
		t.Errorf("purge matching: %v", out)
	}
	if got := strings.Join(f.ids("st.pay.dlq"), " "); got != "1-1" {
		t.Errorf("after purge of amount > 2: %s", got)
	}
	// one of two alike list letters, by its content ref
	var l lettersJSON
	f.get("/api/pipelines/jobs/dead-letters?order=oldest", &l)
	out = post("/api/pipelines/jobs/dead-letters/redrive", `{"refs": [`+fmt.Sprintf("%q", l.Letters[0].Ref)+`]}`)
	if out["count"] != 1.0 || out["target"] != "st.jobs" {
		t.Errorf("redrive one list letter: %v", out)
	}
	if n, _ := f.rdb.LLen(context.Background(), "st.jobs.dlq").Result(); n != 2 {
		t.Errorf("list letters left: %d, want 2", n)
	}
	// a filter that does not compile refuses, with its position
	code, bad := f.post("/api/pipelines/pay/dead-letters/purge", "s3cret", "c", origin, `{"all": true, "where": "paylod"}`)
	if code != 400 || bad["column"] != 1.0 {
		t.Errorf("bad filter: %d %v", code, bad)
	}
	if code, _ := f.post("/api/pipelines/pay/dead-letters/purge", "s3cret", "c", origin, `{}`); code != 400 {
		t.Errorf("nothing selected: %d", code)
	}
	if got := f.ids("st.pay.dlq"); len(got) != 1 {
		t.Errorf("refused purges changed Redis: %v", got)
	}
}

func TestPageAndAssets(t *testing.T) {
	f := newFixture(t, "")
	resp, err := http.Get(f.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(b)
	if resp.StatusCode != 200 || !strings.Contains(page, `<svg`) || !strings.Contains(page, `data-pipeline="pay"`) ||
		!strings.Contains(page, `data-admin="off"`) || !strings.Contains(page, `assets/status.js`) {
		t.Errorf("page: %d\n%s", resp.StatusCode, page)
	}
	if strings.Contains(page, "http://") && !strings.Contains(page, `xmlns="http://www.w3.org/2000/svg"`) || strings.Contains(page, "https://") {
		t.Errorf("page refers to an external address")
	}
	var csrf bool
	for _, c := range resp.Cookies() {
		csrf = csrf || c.Name == csrfCookie && c.Value != ""
	}
	if !csrf {
		t.Errorf("no %s cookie", csrfCookie)
	}
	for path, want := range map[string]int{
		"/assets/status.js": 200, "/assets/status.css": 200, "/graph.svg": 200,
		"/assets/": 404, "/assets/index.html": 404, "/nope": 404,
	} {
		r, err := http.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, r.StatusCode, want)
		}
	}
}

func TestLayoutRowsAndCycles(t *testing.T) {
	// a → k1 → b → k2 → a: a cycle; and c alone
	g := Graph{
		Nodes: []Node{{ID: "a", Label: "a", Pipeline: true}, {ID: "b", Label: "b", Pipeline: true}, {ID: "c", Label: "c", Pipeline: true},
			{ID: "k0", Label: "in"}, {ID: "k1", Label: "k1"}, {ID: "k2", Label: "k2"}},
		Edges: []Edge{{"k0", "a", "stream"}, {"a", "k1", "emit"}, {"k1", "b", "list"}, {"b", "k2", "emit"}, {"k2", "a", "list"}},
	}
	l := layers(g)
	if l["k0"] != 0 || l["a"] != 1 || l["k1"] != 2 || l["b"] != 3 || l["k2"] != 4 || l["c"] != 0 {
		t.Errorf("layers = %v", l)
	}
	svg := renderSVG(g)
	if strings.Count(svg, `<path class="edge"`) != 5 || strings.Count(svg, `class="node pipeline"`) != 3 {
		t.Errorf("svg:\n%s", svg)
	}
	if s := renderSVG(Graph{Nodes: []Node{{ID: "x", Label: `<b>&"`}}}); strings.Contains(s, "<b>") {
		t.Errorf("label not escaped: %s", s)
	}
}
