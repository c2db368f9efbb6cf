package e2e

import (
	"regexp"
	"syscall"
	"testing"
	"time"
)

// The source gauges (SPEC §10 "More metrics") are sampled at start and every 15 s: the numbers
// inspect prints, for an autoscaler or an alert.
func TestSourceGauges(t *testing.T) {
	e := newStreamEnv(t)
	e.streamXAdd("jobs.dlq", "x-dead-letter-reason", "boom", "payload", "a")
	e.streamXAdd("jobs.dlq", "x-dead-letter-reason", "boom", "payload", "b")
	for range 3 {
		e.streamXAdd("jobs", "payload", "p")
	}
	cfg := e.streamConfig(streamPipeline("stream", "", "  dead_letter = \"jobs.dlq\"\n", `
  rule "ok" {
    outcome = "ack"
  }
`))
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	for _, want := range []string{
		`flowrun_dead_letter_length\{pipeline="jobs"\} 2`,
		`flowrun_source_lag\{pipeline="jobs"\} \d+`,
		`flowrun_source_pending\{pipeline="jobs"\} \d+`,
	} {
		re := regexp.MustCompile(want)
		eventually(t, 10*time.Second, want, func() bool {
			_, body := httpGet("http://" + addr + "/metrics")
			return re.MatchString(body)
		})
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// trim = "acked" trims what the group has read and acknowledged, through the binary (SPEC §11):
// within one 10 s round, the stream is down to the last entry delivered.
func TestTrimAckedThroughTheBinary(t *testing.T) {
	e := newStreamEnv(t)
	for range 20 {
		e.streamXAdd("jobs", "payload", "p")
	}
	cfg := e.streamConfig(streamPipeline("stream", "    trim = \"acked\"\n", "", `
  rule "ok" {
    outcome = "ack"
  }
`))
	p := start(t, "run", cfg)
	eventually(t, 25*time.Second, "the acknowledged entries trimmed", func() bool { return e.streamXLen("jobs") <= 1 })
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
