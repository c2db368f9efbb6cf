package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// flowrun_handler_seconds has buckets that fit a rule's microseconds (SPEC §10, issue 26): a rule
// pipeline's observations spread over several buckets rather than nearly all falling in the
// first, so a p99 is a measurement.
func TestHandlerSecondsBucketsFitRules(t *testing.T) {
	e := newStreamEnv(t)
	const n = 2000
	pipe := e.rdb.Pipeline()
	for i := range n {
		pipe.XAdd(context.Background(), &redis.XAddArgs{Stream: "jobs", Values: []string{"payload", fmt.Sprintf(`{"n":%d,"kind":"k%d"}`, i, i%7)}})
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := e.streamConfig(streamPipeline("stream", "", "  concurrency = 2\n", `
  rule "odd" {
    when    = "payload.n > 1000 && payload.kind in ['k1', 'k3', 'k5']"
    outcome = "drop"
  }
  rule "ok" {
    emit "stream" {
      key     = "jobs.done"
      payload = "{'n': payload.n, 'kind': upper(payload.kind), 'tag': payload.kind + '-' + string(payload.n)}"
    }
    outcome = "ack"
  }
`))
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	count := regexp.MustCompile(`flowrun_handler_seconds_count\{pipeline="jobs"\} (\d+)`)
	var body string
	eventually(t, 30*time.Second, "every entry observed", func() bool {
		_, body = httpGet("http://" + addr + "/metrics")
		m := count.FindStringSubmatch(body)
		return m != nil && m[1] == strconv.Itoa(n)
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	bucket := regexp.MustCompile(`flowrun_handler_seconds_bucket\{pipeline="jobs",le="([^"]+)"\} (\d+)`)
	prev, used, most, first := 0, 0, 0, -1
	var spread []string
	for _, m := range bucket.FindAllStringSubmatch(body, -1) {
		c, _ := strconv.Atoi(m[2])
		in := c - prev // the histogram is cumulative
		prev = c
		if first < 0 {
			first = in
			if m[1] != "1e-06" {
				t.Errorf("the first bucket is le=%s, want 1e-06 (1 µs)", m[1])
			}
		}
		if in > 0 {
			used++
			most = max(most, in)
			spread = append(spread, fmt.Sprintf("le=%s: %d", m[1], in))
		}
	}
	t.Logf("%d rule observations by bucket: %v", n, spread)
	if used < 3 {
		t.Errorf("observations fall in %d buckets, want at least 3: %v", used, spread)
	}
	if first*100 >= 90*n || most*100 >= 90*n {
		t.Errorf("one bucket holds %d of %d observations (the first %d): the buckets do not fit a rule's time", most, n, first)
	}
}
