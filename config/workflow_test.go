package config

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/flowrun/flowrun/transports/redislist"
	"github.com/flowrun/flowrun/transports/redisstream"
)

func TestLoadWorkflow(t *testing.T) {
	cfg := mustLoad(t, "testdata/workflow/order.hcl")
	if len(cfg.Pipelines) != 1 || len(cfg.Workflows) != 2 {
		t.Fatalf("pipelines %d, workflows %d", len(cfg.Pipelines), len(cfg.Workflows))
	}
	w := cfg.Workflow("order")
	if w == nil {
		t.Fatal("no workflow order")
	}
	if w.Redis != "main" || w.OnFailure != "compensate" || w.Retention != 24*time.Hour || w.RunID == nil ||
		w.DeadLetter != "flowrun:{order}:dead" {
		t.Errorf("workflow: %+v", w)
	}
	st := w.Start
	if st == nil || st.Name != "order" || st.Source == nil || st.Source.Kind != "stream" || st.Source.Redis != "main" ||
		st.Concurrency != 2 || st.Rules != nil || st.Handler != nil {
		t.Fatalf("start: %+v", st)
	}
	sc := st.Source.Config.(*redisstream.Config)
	if sc.Options.Stream != "orders" || sc.Options.Group != "order" {
		t.Errorf("start source: stream %q group %q", sc.Options.Stream, sc.Options.Group)
	}
	var names []string
	for _, s := range w.Steps {
		names = append(names, s.Name)
		if s.Pipeline.Name != "order/"+s.Name || s.Pipeline.Source != nil || s.Pipeline.DeadLetter != "flowrun:{order}:dead" {
			t.Errorf("step %s pipeline: %+v", s.Name, s.Pipeline)
		}
	}
	if got := names; len(got) != 5 || got[0] != "reserve" || got[4] != "refund" {
		t.Errorf("steps %v", got)
	}
	r := w.Step("reserve")
	if r.Next != "charge" || r.Compensate != "release" || r.Payload == nil || r.Pipeline.MaxAttempts != 5 ||
		r.Pipeline.Handler == nil || r.Pipeline.Handler.Name != "http" || r.Choice || !r.Pipeline.CanRetry {
		t.Errorf("reserve: %+v", r)
	}
	c := w.Step("charge")
	if c.Timeout != 10*time.Minute || c.OnTimeout != "refund" || c.Next != "check-charge" {
		t.Errorf("charge: %+v", c)
	}
	ch := w.Step("check-charge")
	if !ch.Choice || ch.Pipeline.Rules == nil || len(ch.Pipeline.Rules.Rules) != 3 {
		t.Fatalf("check-charge: %+v", ch)
	}
	rs := ch.Pipeline.Rules.Rules
	if rs[0].Next != "refund" || rs[0].Outcome != nil || rs[1].Fail == nil || rs[2].Output == nil || !rs[2].Complete || rs[2].Next != "" {
		t.Errorf("check-charge rules: %+v", rs)
	}
	if ref := w.Step("refund"); ref.Delay != time.Minute || ref.Pipeline.Concurrency != 3 {
		t.Errorf("refund: %+v", ref)
	}
	if w.Fingerprint() == "" || st.Fingerprint() != w.Fingerprint() || r.Pipeline.Fingerprint() != w.Fingerprint() {
		t.Errorf("fingerprints: %q %q %q", w.Fingerprint(), st.Fingerprint(), r.Pipeline.Fingerprint())
	}
	if got := w.RedisBlocks(); len(got) != 1 || got[0] != "main" {
		t.Errorf("redis blocks %v", got)
	}

	s := cfg.Workflow("stopper")
	if s.OnFailure != "stop" || s.DeadLetter != "flowrun:{stopper}:failed" || s.Retention != DefaultRetention {
		t.Errorf("stopper: %+v", s)
	}
	if lc := s.Start.Source.Config.(*redislist.Config); lc.Options.Key != "jobs" {
		t.Errorf("stopper start: %+v", lc.Options)
	}
	if o := s.Steps[0]; !o.Choice || o.Pipeline.Concurrency < 1 || o.Pipeline.ShutdownTimeout != DefaultShutdownTimeout {
		t.Errorf("stopper step: %+v", o.Pipeline)
	}
}

// TestWorkflowFingerprint: a workflow's fingerprint follows its block, not its layout or
// comments, nor the other blocks.
func TestWorkflowFingerprint(t *testing.T) {
	src, err := os.ReadFile("testdata/workflow/order.hcl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() // the folder is part of a fingerprint
	load := func(text string) *Config {
		t.Helper()
		p := dir + "/w.hcl"
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return mustLoad(t, p)
	}
	base := load(string(src))
	comment := load(string(bytes.Replace(src, []byte(`  step "charge" {`), []byte("  # a comment\n  step \"charge\" {"), 1)))
	changed := load(string(bytes.Replace(src, []byte(`timeout    = "10m"`), []byte(`timeout    = "11m"`), 1)))
	other := load(string(bytes.Replace(src, []byte(`stream = "other"`), []byte(`stream = "other2"`), 1)))
	fp := func(c *Config, name string) string { return c.Workflow(name).Fingerprint() }
	if fp(base, "order") != fp(comment, "order") {
		t.Error("a comment changed the fingerprint")
	}
	if fp(base, "order") == fp(changed, "order") {
		t.Error("a changed timeout kept the fingerprint")
	}
	if fp(base, "stopper") != fp(changed, "stopper") || fp(base, "order") != fp(other, "order") {
		t.Error("another block changed the fingerprint")
	}
}
