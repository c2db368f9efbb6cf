package status

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports"
	_ "github.com/flowrun/flowrun/transports/schedule"
)

// A schedule source's card carries its next tick; other sources' carry none.
func TestAPIStatusNextTick(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flow.hcl")
	body := `
pipeline "clock" {
  source "schedule" {
    cron     = "0 2 * * *"
    timezone = "Europe/Berlin"
  }
  rule "all" { outcome = "ack" }
}
pipeline "lines" {
  source "file" {
    path = "in.jsonl"
  }
  rule "all" { outcome = "ack" }
}
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load([]string{path}, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	srv := httptest.NewServer(Handler(Options{
		Pipelines: func() []*config.Pipeline { return cfg.Pipelines },
		Engine:    func() []engine.PipelineStatus { return nil },
		Stats:     func(string) (transports.Stats, time.Time, bool) { return transports.Stats{}, time.Time{}, false },
		Refresh:   func() {},
		Env:       func(string) *transports.Env { return &transports.Env{Logger: zerolog.Nop()} },
		Graph:     func() Graph { return Graph{} },
		Logger:    zerolog.Nop(),
	}))
	t.Cleanup(srv.Close)
	f := &fixture{t: t, srv: srv}
	var st struct {
		Pipelines []map[string]json.RawMessage `json:"pipelines"`
	}
	if code := f.get("/api/status", &st); code != 200 || len(st.Pipelines) != 2 {
		t.Fatalf("status %d: %+v", code, st)
	}
	var tick time.Time
	if err := json.Unmarshal(st.Pipelines[0]["next_tick"], &tick); err != nil {
		t.Fatalf("clock's next_tick %s: %v", st.Pipelines[0]["next_tick"], err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if l := tick.In(berlin); l.Hour() != 2 || l.Minute() != 0 || time.Until(tick) <= 0 || time.Until(tick) > 25*time.Hour {
		t.Errorf("next tick %s (%s in Berlin), want the next 02:00 there", tick, l)
	}
	if raw, ok := st.Pipelines[1]["next_tick"]; ok {
		t.Errorf("a file source has a next tick: %s", raw)
	}
}
