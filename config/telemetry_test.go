package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTelemetryBlock(t *testing.T) {
	dir := t.TempDir()
	pipeline := "pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"a\" {\n    outcome = \"ack\"\n  }\n}\n"
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.hcl", pipeline)
	if cfg := mustLoad(t, dir); cfg.Telemetry != nil {
		t.Fatalf("telemetry %+v without a block", cfg.Telemetry)
	}
	write("b.hcl", "telemetry {\n  otlp_endpoint = \"https://otel.example:4318/base\"\n}\n")
	cfg := mustLoad(t, dir)
	if tel := cfg.Telemetry; tel == nil || tel.OTLPEndpoint != "https://otel.example:4318/base" || tel.SampleRatio != 1 {
		t.Fatalf("telemetry %+v; want the endpoint and sample_ratio 1 by default", tel)
	}
	write("b.hcl", "telemetry {\n  sample_ratio = 0.25\n}\n")
	if tel := mustLoad(t, dir).Telemetry; tel == nil || tel.OTLPEndpoint != "" || tel.SampleRatio != 0.25 {
		t.Fatalf("telemetry %+v; want no endpoint (the environment's) and 0.25", tel)
	}
}
