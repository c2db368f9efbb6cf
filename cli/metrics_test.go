package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

// pushSource hands over n deliveries, then waits for the stop.
type pushSource struct{ n int }

func (s pushSource) Receive(ctx context.Context, feed engine.Feed) error {
	for i := 0; i < s.n; {
		room := feed.Room(ctx)
		if room == 0 {
			return ctx.Err()
		}
		var ds []*engine.Delivery
		for ; room > 0 && i < s.n; room, i = room-1, i+1 {
			ds = append(ds, &engine.Delivery{Message: engine.Message{Key: "in", ID: strconv.Itoa(i), Headers: map[string]string{}}})
		}
		if !feed.Push(ctx, ds) {
			return ctx.Err()
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

func (pushSource) Settle(context.Context, []engine.Settlement) error { return nil }
func (pushSource) Requeue(context.Context, []*engine.Message) error  { return nil }
func (pushSource) Capabilities() engine.Capabilities {
	return engine.Capabilities{Ack: true, Batch: 50}
}
func (pushSource) Close() error { return nil }

// lastProgress is the last progress line logged, if any.
func lastProgress(t *testing.T, logs *syncBuf) (handled int64, outcomes map[string]int64) {
	for _, line := range bytes.Split([]byte(logs.String()), []byte("\n")) {
		var l struct {
			Message  string           `json:"message"`
			Handled  int64            `json:"handled"`
			Outcomes map[string]int64 `json:"outcomes"`
		}
		if len(line) == 0 {
			continue
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l.Message == "progress" {
			handled, outcomes = l.Handled, l.Outcomes
		}
	}
	return handled, outcomes
}

// The progress lines, the engine's Status and a scrape of /metrics read one set of counters:
// once the pipeline is idle they agree to the message.
func TestMetricsProgressAndStatusAgree(t *testing.T) {
	const n = 5000
	outcomes := []engine.Outcome{engine.Ack(), engine.Drop(), engine.DeadLetter("bad"), engine.Retry()}
	var logs syncBuf
	p := &engine.Pipeline{
		Name: "p", Source: pushSource{n: n}, Concurrency: 4, MaxAttempts: 3, DeadLetter: "dlq",
		ShutdownTimeout: 5 * time.Second, Logger: zerolog.New(&logs).Level(zerolog.InfoLevel),
		Handler: engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
			i, _ := strconv.Atoi(d.ID)
			return engine.Result{Outcome: outcomes[i%len(outcomes)]}
		}),
	}
	m := newMetrics()
	eng := engine.New(engine.Options{Metrics: m, Progress: 5 * time.Millisecond}, p)
	m.readEngine(eng)
	srv := httptest.NewServer(m.handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()

	var handled int64
	var logged map[string]int64
	for deadline := time.Now().Add(20 * time.Second); handled != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line said %d handled; last %d %v", n, handled, logged)
		}
		handled, logged = lastProgress(t, &logs)
	}
	st := eng.Status()[0]
	scraped := scrapeOutcomes(t, srv.URL)
	var sum int64
	for _, l := range engine.OutcomeLabels {
		if st.Totals[l] != scraped[l] || logged[l] != scraped[l] {
			t.Errorf("%s: /metrics %d, status %d, progress %d", l, scraped[l], st.Totals[l], logged[l])
		}
		sum += scraped[l]
	}
	if sum != n || scraped["dead"] != st.Totals["dead_letter"] || st.Totals["ack"] != n/4 {
		t.Errorf("/metrics %v (sum %d), status %v; want %d in all, a quarter of them ack", scraped, sum, st.Totals, n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// scrapeOutcomes reads pipeline p's flowrun_messages_total by outcome, and its
// flowrun_dead_letters_total as "dead".
func scrapeOutcomes(t *testing.T, url string) map[string]int64 {
	t.Helper()
	res, err := get(url)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, l := range engine.OutcomeLabels {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^flowrun_messages_total\{outcome="%s",pipeline="p"\} (\d+)$`, l))
		mm := re.FindStringSubmatch(res)
		if mm == nil {
			t.Fatalf("no flowrun_messages_total for %s in:\n%s", l, res)
		}
		out[l], _ = strconv.ParseInt(mm[1], 10, 64)
	}
	mm := regexp.MustCompile(`(?m)^flowrun_dead_letters_total\{pipeline="p"\} (\d+)$`).FindStringSubmatch(res)
	if mm == nil {
		t.Fatalf("no flowrun_dead_letters_total in:\n%s", res)
	}
	out["dead"], _ = strconv.ParseInt(mm[1], 10, 64)
	if !regexp.MustCompile(`(?m)^flowrun_inflight\{pipeline="p"\} 0$`).MatchString(res) {
		t.Fatalf("no flowrun_inflight 0 for an idle pipeline in:\n%s", res)
	}
	return out
}

func get(url string) (string, error) {
	res, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

// flowrun_inflight is the number of handlers running at the scrape (read from the engine, as
// Status reads it): with every worker held inside its handler, it says the concurrency.
func TestMetricsInflightWhileHandlersRun(t *testing.T) {
	const conc = 3
	release := make(chan struct{})
	p := &engine.Pipeline{
		Name: "p", Source: pushSource{n: 10}, Concurrency: conc, ShutdownTimeout: 5 * time.Second,
		Logger: zerolog.Nop(),
		Handler: engine.HandlerFunc(func(ctx context.Context, _ *engine.Delivery) engine.Result {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return engine.Result{Outcome: engine.Ack()}
		}),
	}
	m := newMetrics()
	eng := engine.New(engine.Options{Metrics: m}, p)
	m.readEngine(eng)
	srv := httptest.NewServer(m.handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()

	want := regexp.MustCompile(fmt.Sprintf(`(?m)^flowrun_inflight\{pipeline="p"\} %d$`, conc))
	var res string
	for deadline := time.Now().Add(10 * time.Second); !want.MatchString(res); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no flowrun_inflight %d while %d handlers run:\n%s", conc, conc, res)
		}
		var err error
		if res, err = get(srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
