package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStatusOneFilterPerClient: through the binary, while one filter from an address walks a
// long dead-letter stream, a second filter from the same address is answered 429 naming the
// limit, and once the first has ended the next is served (SPEC §15 "Hostile content").
func TestStatusOneFilterPerClient(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(`
pipeline "work" {
  source "stream" {
    stream = "fs.work"
    group  = "g"
  }
  dead_letter = "fs.work.dlq"
  rule "all" { outcome = "ack" }
}
`)
	const letters = 100_000
	for i := 0; i < letters; i += 1000 {
		pipe := e.rdb.Pipeline()
		for j := 0; j < 1000; j++ {
			pipe.XAdd(e.ctx, &redis.XAddArgs{Stream: "fs.work.dlq", Values: []string{"x-dead-letter-reason", "boom", "payload", fmt.Sprintf(`{"n":%d}`, i+j)}})
		}
		if _, err := pipe.Exec(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	base := "http://" + addr + "/"
	eventually(t, 10*time.Second, "ready", func() bool { code, _ := httpGet(base + "readyz"); return code == 200 })
	filter := base + "api/pipelines/work/dead-letters?where=" + url.QueryEscape("payload.n == -1")

	type answer struct {
		code int
		body string
		took time.Duration
	}
	get := func() answer {
		t0 := time.Now()
		resp, err := http.Get(filter)
		if err != nil {
			t.Error(err)
			return answer{}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, string(b), time.Since(t0)}
	}
	// Two filters at once from this address: while one walks every letter the other is refused.
	var refused, served answer
	eventually(t, 20*time.Second, "one of two filters at once refused while the other runs", func() bool {
		pair := make(chan answer, 2)
		go func() { pair <- get() }()
		go func() { pair <- get() }()
		x, y := <-pair, <-pair
		if x.code == http.StatusTooManyRequests {
			x, y = y, x
		}
		served, refused = x, y
		return refused.code == http.StatusTooManyRequests && served.code != http.StatusTooManyRequests
	})
	if !strings.Contains(refused.body, "one at a time per client") {
		t.Errorf("429 body %q does not name the limit", refused.body)
	}
	if served.code != http.StatusOK && served.code != http.StatusBadRequest {
		t.Errorf("the filter that ran: %d %s", served.code, served.body)
	}
	// Once it has ended, the next filter from the address is served.
	if c := get(); c.code == http.StatusTooManyRequests {
		t.Errorf("after the first ended, a filter was still refused: %s", c.body)
	}
	stop(t, p)
}
