package schedule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/config"
)

func load(t *testing.T, body string) (*config.Config, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flow.hcl")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load([]string{path}, config.Options{})
	var out []string
	for _, d := range diags {
		out = append(out, d.Error())
	}
	return cfg, strings.Join(out, "\n")
}

const tickPipeline = `pipeline "p" {
  source "schedule" {
    every = "1s"
  }
  %s
  rule "r" { outcome = "ack" }
}
`

// Without any redis block a schedule takes its ticks within the process; with one it uses it;
// a dead letter needs one.
func TestRedisOptional(t *testing.T) {
	cfg, diags := load(t, strings.Replace(tickPipeline, "%s", "", 1))
	if diags != "" || cfg.Pipelines[0].Source.Redis != "" {
		t.Errorf("without redis: %q, redis %q", diags, cfg.Pipelines[0].Source.Redis)
	}
	c := cfg.Pipelines[0].Source.Config.(*Config)
	if c.Pipeline != "p" || c.Clock.String() != "every 1s" || c.CatchUp != 0 {
		t.Errorf("decoded %+v", c.Options)
	}
	cfg, diags = load(t, "redis \"main\" {\n  url = \"redis://127.0.0.1:1/0\"\n}\n"+strings.Replace(tickPipeline, "%s", "", 1))
	if diags != "" || cfg.Pipelines[0].Source.Redis != "main" {
		t.Errorf("with one redis block: %q, redis %q", diags, cfg.Pipelines[0].Source.Redis)
	}
	_, diags = load(t, strings.Replace(tickPipeline, "%s", `dead_letter = "p.dlq"`, 1))
	if !strings.Contains(diags, `flow.hcl:5,17-24: Invalid value; A schedule source without a redis block has nowhere to keep dead letters`) {
		t.Errorf("dead_letter without redis: %q", diags)
	}
}

// A cron expression that never matches is refused at its position.
func TestCronThatNeverTicks(t *testing.T) {
	_, diags := load(t, strings.NewReplacer(`every = "1s"`, `cron = "0 0 30 2 *"`, "%s", "").Replace(tickPipeline))
	if !strings.Contains(diags, `flow.hcl:3,12-24: Invalid value; "0 0 30 2 *" names no date that exists`) {
		t.Errorf("diagnostics %q", diags)
	}
}
