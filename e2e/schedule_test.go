package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The schedule source through the binary (SPEC §17): two processes on one redis-server fire
// each tick once between them, catch_up after a restart fires the missed ticks once, validate
// positions its mistakes, inspect shows the next tick, and a schedule starts workflow runs.

// schedPipeline is a pipeline "tick" firing every second, each tick emitted to the stream
// sched.ticks with its x-scheduled-at and the process that took it.
func schedPipeline(by, extra string) string {
	return fmt.Sprintf(`pipeline "tick" {
  source "schedule" {
    every = "1s"
%s  }
  rule "emit" {
    emit "stream" {
      key     = "sched.ticks"
      payload = "payload"
      headers = { at = "headers['x-scheduled-at']", by = "'%s'" }
    }
    outcome = "ack"
  }
}
`, extra, by)
}

// schedConfig writes dir/flow.hcl: the redis block on e's server and body.
func (e *redisEnv) schedConfig(dir, body string) string {
	e.t.Helper()
	return writeFile(e.t, filepath.Join(e.dir, dir), "flow.hcl", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n\n%s", e.srv.URL, body))
}

// schedTicks reads sched.ticks: each entry's tick, checked against its payload, and who took it.
func (e *redisEnv) schedTicks() (ticks []time.Time, by map[string]int) {
	e.t.Helper()
	xs, err := e.rdb.XRange(context.Background(), "sched.ticks", "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	by = map[string]int{}
	for _, x := range xs {
		at, _ := x.Values["at"].(string)
		tick, err := time.Parse(time.RFC3339, at)
		if err != nil {
			e.t.Fatalf("entry %s: at %q: %v", x.ID, at, err)
		}
		if p := x.Values["payload"]; p != `{"scheduled_at":"`+at+`"}` {
			e.t.Errorf("entry %s: payload %v, want scheduled_at %s", x.ID, p, at)
		}
		ticks = append(ticks, tick)
		by[fmt.Sprint(x.Values["by"])]++
	}
	return ticks, by
}

// schedOnce fails unless ticks (in emit order) are each once, a second apart, none missing.
func schedOnce(t *testing.T, ticks []time.Time) {
	t.Helper()
	sorted := slices.SortedFunc(slices.Values(ticks), func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(sorted); i++ {
		if d := sorted[i].Sub(sorted[i-1]); d != time.Second {
			t.Fatalf("ticks %v: %s then %s (%s apart); want every tick once, a second apart",
				sorted, sorted[i-1].Format(time.TimeOnly), sorted[i].Format(time.TimeOnly), d)
		}
	}
}

// schedWait polls sched.ticks until it holds n entries.
func (e *redisEnv) schedWait(n int64) {
	e.t.Helper()
	eventually(e.t, 30*time.Second, fmt.Sprintf("%d ticks in sched.ticks", n), func() bool {
		return e.rdb.XLen(context.Background(), "sched.ticks").Val() >= n
	})
}

// schedLast is flowrun:schedule:{tick}:last as a time.
func (e *redisEnv) schedLast() time.Time {
	e.t.Helper()
	s, err := e.rdb.Get(context.Background(), "flowrun:schedule:{tick}:last").Result()
	if err != nil {
		e.t.Fatalf("last: %v", err)
	}
	ms, _ := strconv.ParseInt(s, 10, 64)
	return time.UnixMilli(ms).UTC()
}

// Two processes sharing one Redis fire every tick exactly once between them: distinct ticks, as
// many as elapsed, each tick's key taken with an expiry, last the newest.
func TestScheduleOnceAcrossProcesses(t *testing.T) {
	e := newRedisEnv(t)
	began := time.Now()
	a := start(t, "run", e.schedConfig("a", schedPipeline("a", "")))
	b := start(t, "run", e.schedConfig("b", schedPipeline("b", "")))
	e.schedWait(5)
	streamStop(t, a)
	streamStop(t, b)
	stopped := time.Now()

	ticks, by := e.schedTicks()
	schedOnce(t, ticks)
	newest := slices.MaxFunc(ticks, func(x, y time.Time) int { return x.Compare(y) })
	oldest := slices.MinFunc(ticks, func(x, y time.Time) int { return x.Compare(y) })
	if early := oldest.Sub(began); early < 0 || early > 5*time.Second {
		t.Errorf("oldest tick %s, started at %s: ticks went missing at the start, or one from before it fired", oldest, began)
	}
	if late := stopped.Sub(newest); late < 0 || late > 5*time.Second {
		t.Errorf("newest tick %s, stopped at %s: ticks went missing at the end", newest, stopped)
	}
	if by["a"]+by["b"] != len(ticks) {
		t.Errorf("ticks by process %v, want %d in all", by, len(ticks))
	}
	ctx := context.Background()
	for _, tick := range ticks {
		key := fmt.Sprintf("flowrun:schedule:{tick}:%d", tick.UnixMilli())
		if ttl := e.rdb.PTTL(ctx, key).Val(); ttl <= time.Hour || ttl > time.Hour+time.Minute {
			t.Errorf("%s expires in %s, want about an hour and a minute", key, ttl)
		}
	}
	if last := e.schedLast(); !last.Equal(newest) {
		t.Errorf("last = %s, want the newest tick %s", last, newest)
	}
	keys := e.rdb.Keys(ctx, "flowrun:schedule:{tick}:*").Val()
	if len(keys) != len(ticks)+1 {
		t.Errorf("%d schedule keys for %d ticks, want one per tick and last: %v", len(keys), len(ticks), keys)
	}
}

// After a restart with catch_up, the ticks missed while no process ran fire once, even with two
// processes starting together; without catch_up they stay missed.
func TestScheduleCatchUpAfterRestart(t *testing.T) {
	e := newRedisEnv(t)
	catchUp := "    catch_up = \"1m\"\n"
	first := start(t, "run", e.schedConfig("a", schedPipeline("a", catchUp)))
	e.schedWait(2)
	streamStop(t, first)
	down := e.schedLast()
	eventually(t, 10*time.Second, "three ticks missed", func() bool { return time.Since(down) > 3500*time.Millisecond })

	a := start(t, "run", e.schedConfig("a", schedPipeline("a", catchUp)))
	b := start(t, "run", e.schedConfig("b", schedPipeline("b", catchUp)))
	eventually(t, 30*time.Second, "ticks up to now", func() bool {
		ticks, _ := e.schedTicks()
		return len(ticks) > 0 && time.Since(slices.MaxFunc(ticks, func(x, y time.Time) int { return x.Compare(y) })) < time.Second
	})
	streamStop(t, a)
	streamStop(t, b)
	ticks, _ := e.schedTicks()
	schedOnce(t, ticks) // no gap where the process was down, no tick twice
	missed := 0
	for _, tick := range ticks {
		if tick.After(down) && tick.Before(down.Add(3500*time.Millisecond)) {
			missed++
		}
	}
	if missed < 3 {
		t.Errorf("%d ticks fired of those missed after %s, want 3: %v", missed, down, ticks)
	}
	if last := e.schedLast(); !last.Equal(slices.MaxFunc(ticks, func(x, y time.Time) int { return x.Compare(y) })) {
		t.Errorf("last = %s, want the newest tick", last)
	}

	// Without catch_up a start fires only the ticks after it.
	down = e.schedLast()
	eventually(t, 10*time.Second, "two ticks missed", func() bool { return time.Since(down) > 2500*time.Millisecond })
	before := len(ticks)
	c := start(t, "run", e.schedConfig("c", schedPipeline("c", "")))
	e.schedWait(int64(before + 1))
	streamStop(t, c)
	ticks, _ = e.schedTicks()
	if gap := ticks[before].Sub(down); gap < 2*time.Second {
		t.Errorf("without catch_up the first tick after the restart is %s after the last, want the missed ones skipped", gap)
	}
}

// validate reports every schedule mistake at its position, all at once.
func TestScheduleValidatePositions(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "bad.hcl", `pipeline "both" {
  source "schedule" {
    cron  = "0 2 * * *"
    every = "1m"
  }
  rule "r" { outcome = "ack" }
}
pipeline "neither" {
  source "schedule" {
    catch_up = "1h"
  }
  rule "r" { outcome = "ack" }
}
pipeline "cron" {
  source "schedule" {
    cron     = "61 2 * * *"
    timezone = "Mars/Olympus"
  }
  rule "r" { outcome = "ack" }
}
pipeline "fields" {
  source "schedule" {
    cron = "0 2 * *"
  }
  rule "r" { outcome = "ack" }
}
`)
	r := flowrun(t, "", "validate", cfg)
	if r.code != 1 {
		t.Fatalf("validate exit %d, want 1:\n%s%s", r.code, r.stdout, r.stderr)
	}
	out := r.stdout + r.stderr
	for _, want := range []string{
		cfg + `:4:5: error: Conflicting arguments: A schedule source takes "cron" or "every", not both.`,
		cfg + `:9:3: error: Missing required argument: A schedule source needs "cron"`,
		cfg + `:16:16: error: Invalid value: Not a cron expression: end of range (61) above maximum (59)`,
		cfg + `:17:16: error: Invalid value: "Mars/Olympus" is not an IANA time zone`,
		cfg + `:23:12: error: Invalid value: Not a cron expression: expected exactly 5 fields, found 4`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate lacks\n  %s\nin:\n%s", want, out)
		}
	}
	if n := strings.Count(out, ": error: "); n != 5 {
		t.Errorf("%d errors, want 5:\n%s", n, out)
	}
}

// inspect shows the schedule and its next tick; without Redis the ticks are taken in the
// process (a record per tick on stdout).
func TestScheduleInspectAndWithoutRedis(t *testing.T) {
	e := newRedisEnv(t)
	cfg := e.schedConfig("a", strings.Replace(schedPipeline("a", ""), `every = "1s"`, `cron = "30 2 * * *"
    timezone = "Europe/Berlin"`, 1))
	r := flowrun(t, "", "inspect", "--json", cfg)
	if r.code != 0 {
		t.Fatalf("inspect exit %d: %s", r.code, r.stderr)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	next, err := time.Parse(time.RFC3339, fmt.Sprint(rows[0]["next_tick"]))
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if err != nil || rows[0]["key"] != "30 2 * * * Europe/Berlin" || next.In(berlin).Format("15:04") != "02:30" || time.Until(next) > 25*time.Hour {
		t.Errorf("inspect row %v, want the schedule and its next 02:30 in Berlin", rows[0])
	}
	table := flowrun(t, "", "inspect", cfg)
	if !strings.Contains(table.stdout, next.Format(time.RFC3339)) {
		t.Errorf("inspect's table lacks the next tick %s:\n%s", next.Format(time.RFC3339), table.stdout)
	}

	dir := t.TempDir()
	local := writeFile(t, dir, "local.hcl", `pipeline "local" {
  source "schedule" {
    every = "1s"
  }
  rule "out" {
    emit "record" {
      key     = "ticks"
      payload = "payload.scheduled_at"
    }
    outcome = "ack"
  }
}
`)
	p := start(t, "run", local)
	eventually(t, 10*time.Second, "two ticks on stdout", func() bool { return strings.Count(p.out.String(), "\n") >= 2 })
	streamStop(t, p)
	var prev time.Time
	for _, line := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
		var rec struct {
			Key     string `json:"key"`
			Payload string `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		tick, err := time.Parse(time.RFC3339, rec.Payload)
		if err != nil || rec.Key != "ticks" || (!prev.IsZero() && tick.Sub(prev) != time.Second) {
			t.Errorf("record %q after %s, want the next second's tick", line, prev)
		}
		prev = tick
	}
}

// A schedule starts one workflow run per tick, each named <workflow>/<tick> and completed; a
// tick never starts two runs however many processes run the workflow.
func TestScheduleStartsWorkflowRuns(t *testing.T) {
	e := newRedisEnv(t)
	body := `workflow "nightly" {
  start {
    source "schedule" {
      every = "1s"
    }
  }
  step "note" {
    rule "done" {
      output = "input.scheduled_at"
    }
  }
}
`
	addr := freeAddr(t)
	a := start(t, "run", "--consumer", "w1", "--http-addr", addr, e.schedConfig("a", body))
	cfg := e.schedConfig("b", body)
	b := start(t, "run", "--consumer", "w2", cfg)
	var runs []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	eventually(t, wfDeadline, "three completed runs", func() bool {
		r := flowrun(t, "", "runs", "list", "nightly", "--json", cfg)
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &runs) != nil {
			return false
		}
		done := 0
		for _, run := range runs {
			if run.Status == "completed" {
				done++
			}
		}
		return done >= 3
	})
	// the status page's card of the workflow's start shows the next tick
	code, page := httpGet("http://" + addr + "/api/status")
	var st struct {
		Pipelines []struct {
			Name     string     `json:"name"`
			NextTick *time.Time `json:"next_tick"`
		} `json:"pipelines"`
	}
	if err := json.Unmarshal([]byte(page), &st); code != 200 || err != nil {
		t.Fatalf("GET /api/status: %d %v\n%s", code, err, page)
	}
	var next *time.Time
	for _, p := range st.Pipelines {
		if p.Name == "nightly" {
			next = p.NextTick
		}
	}
	if next == nil || time.Until(*next) > 2*time.Second || time.Since(*next) > 5*time.Second {
		t.Errorf("the start's card shows next tick %v, want a second from now:\n%s", next, page)
	}
	streamStop(t, a)
	streamStop(t, b)
	r := flowrun(t, "", "runs", "list", "nightly", "--json", cfg)
	if err := json.Unmarshal([]byte(r.stdout), &runs); err != nil {
		t.Fatal(err)
	}
	var ticks []time.Time
	for _, run := range runs {
		at, ok := strings.CutPrefix(run.ID, "nightly/")
		tick, err := time.Parse(time.RFC3339, at)
		if !ok || err != nil {
			t.Fatalf("run id %q, want nightly/<tick>", run.ID)
		}
		ticks = append(ticks, tick)
		if run.Status != "completed" {
			continue // the last may have been cut short by the stop
		}
		show, ok := runsShow(t, cfg, "nightly", run.ID)
		var out string
		if ok {
			show.output(t, "note", &out)
		}
		if out != at {
			t.Errorf("run %s: output %q, want its tick", run.ID, out)
		}
	}
	schedOnce(t, ticks)
	if n := e.rdb.Get(context.Background(), "flowrun:schedule:{nightly}:last").Val(); n == "" {
		t.Error("the workflow's schedule kept no last tick")
	}
}

// A tick another process took (and died with, as kill -9 leaves it) is not fired again: its
// key says taken. The ticks around it fire.
func TestScheduleTakenTickIsNotRefired(t *testing.T) {
	e := newRedisEnv(t)
	taken := time.Now().Truncate(time.Second).Add(5 * time.Second) // well after the start
	key := fmt.Sprintf("flowrun:schedule:{tick}:%d", taken.UnixMilli())
	if err := e.rdb.Set(context.Background(), key, "gone-host:1:1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	p := start(t, "run", e.schedConfig("a", schedPipeline("a", "")))
	eventually(t, 30*time.Second, "a tick after the taken one", func() bool {
		ticks, _ := e.schedTicks()
		return slices.ContainsFunc(ticks, func(x time.Time) bool { return x.After(taken) })
	})
	streamStop(t, p)
	ticks, _ := e.schedTicks()
	if slices.ContainsFunc(ticks, func(x time.Time) bool { return x.Equal(taken) }) {
		t.Errorf("the tick %s another process took fired here too: %v", taken, ticks)
	}
	for _, near := range []time.Time{taken.Add(-time.Second), taken.Add(time.Second)} {
		if !slices.ContainsFunc(ticks, func(x time.Time) bool { return x.Equal(near) }) {
			t.Errorf("tick %s missing: %v", near, ticks)
		}
	}
	if v := e.rdb.Get(context.Background(), key).Val(); v != "gone-host:1:1" {
		t.Errorf("%s = %q, want the dead owner's name kept", key, v)
	}
}
