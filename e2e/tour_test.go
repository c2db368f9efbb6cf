package e2e

import (
	"context"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/internal/redistest"
)

// readmeTourCommands returns the commands of the README's tour block that runs
// examples/tour.hcl, one per line, split into words as a shell would ('…' quoted).
func readmeTourCommands(t *testing.T) [][]string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```sh\nflowrun run examples/tour.hcl &\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok {
		t.Fatalf("the README has no sh block starting `flowrun run examples/tour.hcl &`")
	}
	word := regexp.MustCompile(`'([^']*)'|(\S+)`)
	var cmds [][]string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		var ws []string
		for _, m := range word.FindAllStringSubmatch(l, -1) {
			ws = append(ws, m[1]+m[2])
		}
		cmds = append(cmds, ws)
	}
	return cmds
}

// The README's five-minute tour does what the README says: the quickstart replays the file and
// prints what it routed; examples/tour.hcl against a real Redis acknowledges the good job (its
// emit on jobs.done), dead-letters the failing one after two attempts, `dlq list` and `inspect`
// show it, `dlq redrive` sends it back; and `flowrun test examples/` passes.
func TestREADMETour(t *testing.T) {
	// 1. A file replay, no Redis.
	r := flowrun(t, "", "run", "../examples/quickstart.hcl")
	if r.code != 0 || !strings.Contains(r.stdout, `"key":"orders.review"`) || !strings.Contains(r.stdout, `"key":"orders.accepted"`) || !strings.Contains(r.stderr, `"message":"input done"`) {
		t.Fatalf("quickstart: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}

	// 2. A Redis stream with a dead letter, the README's commands as written there.
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	t.Setenv("REDIS_URL", "redis://"+srv.Addr+"/0")
	cmds := readmeTourCommands(t)
	var xadds [][]string
	for _, c := range cmds {
		if c[0] == "redis-cli" {
			xadds = append(xadds, c[1:])
		}
	}
	if len(xadds) != 2 || xadds[0][0] != "XADD" {
		t.Fatalf("the README's tour adds %q; want two XADDs", xadds)
	}
	p := start(t, "run", "../examples/tour.hcl")
	eventually(t, 10*time.Second, "the group jobs", func() bool {
		groups, err := rdb.XInfoGroups(ctx, "jobs").Result()
		return err == nil && len(groups) == 1
	})
	for _, x := range xadds {
		args := make([]any, len(x))
		for i, w := range x {
			args[i] = w
		}
		if err := rdb.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redis-cli %v: %v", x, err)
		}
	}
	settled := func() bool {
		pending, err := rdb.XPending(ctx, "jobs", "jobs").Result()
		return rdb.XLen(ctx, "jobs.dlq").Val() == 1 && err == nil && pending.Count == 0
	}
	eventually(t, 10*time.Second, "one dead letter and nothing pending", settled)
	done := rdb.XRange(ctx, "jobs.done", "-", "+").Val()
	if len(done) != 1 || done[0].Values["payload"] != `{"id":1}` {
		t.Errorf("jobs.done holds %v, want the one announcement {\"id\":1}", done)
	}
	letters := rdb.XRange(ctx, "jobs.dlq", "-", "+").Val()
	if len(letters) != 1 || letters[0].Values["payload"] != `{"id":2,"ok":false}` || letters[0].Values["x-attempts"] != "2" {
		t.Errorf("jobs.dlq holds %v, want job 2 after 2 attempts", letters)
	}

	// The README's own `flowrun dlq list` and `flowrun inspect` lines, run from the root's view.
	want := map[string]*regexp.Regexp{
		"dlq":     regexp.MustCompile(`max_attempts 2 reached\s+\{"id":2,"ok":false\}`),
		"inspect": regexp.MustCompile(`(?m)^jobs\s+stream\s+jobs\s+3\s+0\s+0\s+.*\s1$`),
	}
	ran := 0
	for _, c := range cmds {
		if c[0] != "flowrun" || c[1] == "run" {
			continue
		}
		args := append([]string(nil), c[1:]...)
		for i, a := range args {
			if strings.HasPrefix(a, "examples/") {
				args[i] = "../" + a
			}
		}
		out := flowrun(t, "", args...)
		ran++
		if re := want[args[0]]; out.code != 0 || re == nil || !re.MatchString(out.stdout) {
			t.Errorf("%s: exit %d\n%s%s", strings.Join(c, " "), out.code, out.stdout, out.stderr)
		}
	}
	if ran != 2 {
		t.Errorf("the README's tour runs %d flowrun commands after run; want dlq list and inspect", ran)
	}
	redrive := flowrun(t, "", "dlq", "redrive", "jobs", "../examples/tour.hcl")
	if redrive.code != 0 || !strings.Contains(redrive.stdout, "redrove 1 dead letters to jobs") {
		t.Errorf("dlq redrive: exit %d\n%s%s", redrive.code, redrive.stdout, redrive.stderr)
	}
	// Redriven at attempt 1, job 2 fails twice more and is a dead letter again.
	eventually(t, 10*time.Second, "the redriven job back in the dead letter", func() bool {
		return rdb.XLen(ctx, "jobs").Val() > 3 && settled()
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Errorf("run exits %d after SIGTERM", code)
	}

	// 3. The test blocks, no connection.
	r = flowrun(t, "", "test", "../examples/")
	if r.code != 0 || !strings.HasSuffix(r.stdout, " passed, 0 failed\n") {
		t.Errorf("flowrun test examples/: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
