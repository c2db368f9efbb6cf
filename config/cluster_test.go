package config

import (
	"fmt"
	"testing"
)

// The checks follow the redis block: only a cluster block's pipelines are checked.
func TestClusterSlotsOnlyOnCluster(t *testing.T) {
	for _, tc := range []struct {
		redis, source, extra string
		bad                  bool
	}{
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "jobs" }`, `delayed_retry = "durable_zset"`, true},
		{`url = "redis://127.0.0.1:6379"`, `source "stream" { stream = "jobs" }`, `delayed_retry = "durable_zset"`, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "{jobs}" }`, `delayed_retry = "durable_zset"`, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "jobs" }`, ``, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "list" { key = "jobs" }`, ``, true},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"jobs\"\n reliable = false\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n processing = \"{q}p\"\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n processing = \"q:p\"\n}", ``, true},
	} {
		src := fmt.Sprintf("redis \"r\" {\n  %s\n}\npipeline \"p\" {\n  %s\n  %s\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n", tc.redis, tc.source, tc.extra)
		path := writeTemp(t, src)
		_, diags := Load([]string{path}, Options{Hostname: "host1"})
		if diags.HasErrors() != tc.bad {
			t.Errorf("%s / %s / %s: errors %v, want %v: %v", tc.redis, tc.source, tc.extra, diags.HasErrors(), tc.bad, diags)
		}
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := t.TempDir() + "/c.hcl"
	write(t, path, content)
	return path
}
