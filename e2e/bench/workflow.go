package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The workflow workload (issue 27): runs of three steps, each step a no-op rule that records an
// output (the step's name), started by messages preloaded on a start stream. A row counts runs:
// its rate is runs per second and its Redis CPU per message is Redis CPU per run.
//
// flowrun: a workflow "bench" whose start source reads the start stream; each step is its own
// step stream and consumer group, settled by flowrun's one script per visit.
//
// Plain: one goroutine per stream (the start stream and the three step streams), each an
// XREADGROUP COUNT batch, then one pipeline per batch with one EVALSHA per message: for a start
// message, the script that creates the run (hash, index, history, active count), writes the
// first step's message and XACKs; for a step message, the script that checks the visit, records
// the output, appends the history, moves the run on (the next step's message, or completed with
// the run's keys set to expire) and XACKs. The plain side does not load the run before the
// step's handler; flowrun does (its rules may read input and steps), and that is in its cost.

// wfSteps are the workload's steps, in order.
var wfSteps = []string{"one", "two", "three"}

// wfMinRatio is issue 27's target for the workflow row: flowrun at least this share of the
// plain program's runs per second.
const wfMinRatio = 0.60

// wfRetention is the retention of finished runs on both sides (flowrun's default).
const wfRetention = 7 * 24 * time.Hour

// wfRuns is how many runs the workload makes of -n: a run is four messages (a start and three
// steps), so n/4 runs move about n messages, as the other workloads do.
func wfRuns(n int) int { return max(n/4, 1) }

func runWorkflow(ctx context.Context, b *bench) (results, error) {
	runs := int64(wfRuns(b.o.n))
	plainKey := "bench:{wfplain}"
	plainStart, flowStart := plainKey+":start", "bench:wf:start"
	r := row{name: "workflow", unit: "run", target: wfMinRatio}
	// Each side runs on an empty keyspace: a side's runs leave three keys each, and the side
	// after it would pay for the larger keyspace (Redis CPU per run 5-10 % higher).
	if err := preloadStreams(ctx, b.rdb, int(runs), plainStart); err != nil {
		return results{}, err
	}
	var err error
	r.plain, err = b.timePlain(ctx, runs, streamSettled(b.obs, plainKey+":s:three", "g"), "workflow", plainKey, runs)
	if err != nil {
		return results{}, err
	}
	if err := checkWorkflow(ctx, b.rdb, plainKey, "g", runs); err != nil {
		return results{}, fmt.Errorf("plain: %w", err)
	}
	if err := b.rdb.FlushAll(ctx).Err(); err != nil {
		return results{}, fmt.Errorf("flushall: %w", err)
	}
	if err := preloadStreams(ctx, b.rdb, int(runs), flowStart); err != nil {
		return results{}, err
	}
	r.flowrun, r.rss, err = b.timeFlowrun("workflow", b.workflowConfig(flowStart), runs, streamSettled(b.obs, "flowrun:{bench}:s:three", "bench"))
	if err != nil {
		return results{}, err
	}
	if err := checkWorkflow(ctx, b.rdb, "flowrun:{bench}", "bench", runs); err != nil {
		return results{}, fmt.Errorf("flowrun: %w", err)
	}
	r.report()
	return results{rows: []row{r}}, nil
}

// workflowConfig is the flowrun side: the workflow "bench", started from stream.
func (b *bench) workflowConfig(stream string) string {
	steps := ""
	for i, s := range wfSteps {
		next := ""
		if i+1 < len(wfSteps) {
			next = fmt.Sprintf("    next = %q\n", wfSteps[i+1])
		}
		steps += fmt.Sprintf(`
  step %q {
%s    rule "noop" {
      output = "run.step"
    }
%s  }
`, s, strings.ReplaceAll(b.concurrencyLine(), "  ", "    "), next)
	}
	return b.redisBlock() + fmt.Sprintf(`workflow "bench" {
  run_id = "string(payload.id)"

  start {
    source "stream" {
      stream   = %q
      consumer = "flowrun"
      batch    = %d
    }
  }
%s}
`, stream, b.o.batch, steps)
}

// checkWorkflow verifies one side's result: every run completed, nothing pending in any of its
// streams, and a run's record says completed.
func checkWorkflow(ctx context.Context, rdb *redis.Client, prefix, group string, runs int64) error {
	for _, s := range wfSteps {
		if err := checkGroup(ctx, rdb, prefix+":s:"+s, group, runs); err != nil {
			return err
		}
	}
	for _, id := range []string{"0", strconv.FormatInt(runs-1, 10)} {
		st, err := rdb.HGet(ctx, prefix+":run:"+id, "status").Result()
		if err != nil || st != "completed" {
			return fmt.Errorf("run %s: status %q (%v), want completed", id, st, err)
		}
	}
	return nil
}

// wfStartScript creates a run unless it exists, enters its first step and acknowledges the start
// message. KEYS: run, hist, runs index, active counts, first step's stream, start stream. ARGV:
// id, input, now (ms), the started event, group, message id, first step.
var wfStartScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'status', 'running', 'step', ARGV[7], 'visit', '1', 'input', ARGV[2],
    'finished', '[]', 'started_at', ARGV[3], 'updated_at', ARGV[3])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
  redis.call('HINCRBY', KEYS[4], ARGV[7], 1)
  redis.call('RPUSH', KEYS[2], ARGV[4])
  redis.call('XADD', KEYS[5], '*', 'run', ARGV[1], 'visit', '1')
end
return redis.call('XACK', KEYS[6], ARGV[5], ARGV[6])
`)

// wfStepScript finishes a step visit unless the run has moved on. KEYS: run, out, hist, active
// counts, this step's stream, the next step's stream (this one's for the last). ARGV: id, visit,
// step, output, the ack event, next step ("" for the last), now (ms), group, message id,
// finished (JSON), the completed event, retention (s).
var wfStepScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'visit') == ARGV[2] then
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
  redis.call('RPUSH', KEYS[3], ARGV[5])
  redis.call('HINCRBY', KEYS[4], ARGV[3], -1)
  if ARGV[6] == '' then
    redis.call('HSET', KEYS[1], 'status', 'completed', 'step', '', 'finished', ARGV[10], 'updated_at', ARGV[7])
    redis.call('RPUSH', KEYS[3], ARGV[11])
    for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[12]) end
  else
    local v = tostring(tonumber(ARGV[2]) + 1)
    redis.call('HSET', KEYS[1], 'step', ARGV[6], 'visit', v, 'finished', ARGV[10], 'updated_at', ARGV[7])
    redis.call('HINCRBY', KEYS[4], ARGV[6], 1)
    redis.call('XADD', KEYS[6], '*', 'run', ARGV[1], 'visit', v)
  end
end
return redis.call('XACK', KEYS[5], ARGV[8], ARGV[9])
`)

// wfEvent is a history entry as JSON, built by hand as a program in a hurry would.
func wfEvent(step string, visit int, outcome string, at time.Time) string {
	return `{"step":"` + step + `","visit":` + strconv.Itoa(visit) + `,"attempt":1,"outcome":"` + outcome +
		`","at":"` + at.UTC().Format(time.RFC3339Nano) + `","error":""}`
}

// plainWorkflow is the hand-written program of the workflow workload, on the keys under prefix:
// it returns once n runs completed.
func (b *bench) plainWorkflow(ctx context.Context, prefix string, n int64) error {
	streams := []string{prefix + ":start"}
	for _, s := range wfSteps {
		streams = append(streams, prefix+":s:"+s)
	}
	for _, s := range streams {
		if err := b.rdb.XGroupCreateMkStream(ctx, s, "g", "0").Err(); err != nil {
			return err
		}
	}
	for _, sc := range []*redis.Script{wfStartScript, wfStepScript} {
		if err := sc.Load(ctx, b.rdb).Err(); err != nil {
			return fmt.Errorf("script load: %w", err)
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(streams))
	for i := range streams[:len(streams)-1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.wfLoop(lctx, prefix, i, -1); err != nil && lctx.Err() == nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	errs[len(streams)-1] = b.wfLoop(lctx, prefix, len(streams)-1, n)
	cancel()
	wg.Wait()
	return errors.Join(errs...)
}

// wfLoop consumes stream i of the workload (0: the start stream, then the steps) until ctx ends,
// or, with n >= 0, until it has settled n messages.
func (b *bench) wfLoop(ctx context.Context, prefix string, i int, n int64) error {
	stream := prefix + ":start"
	if i > 0 {
		stream = prefix + ":s:" + wfSteps[i-1]
	}
	args := &redis.XReadGroupArgs{Group: "g", Consumer: "plain", Streams: []string{stream, ">"}, Count: int64(b.o.batch), Block: time.Second}
	for done := int64(0); n < 0 || done < n; {
		res, err := b.rdb.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return fmt.Errorf("xreadgroup %s: %w", stream, err)
		}
		p := b.rdb.Pipeline()
		now := time.Now()
		ms := strconv.FormatInt(now.UnixMilli(), 10)
		for _, s := range res {
			for _, m := range s.Messages {
				if i == 0 {
					b.wfStart(ctx, p, prefix, m, now, ms)
				} else {
					b.wfStep(ctx, p, prefix, i-1, m, now, ms)
				}
				done++
			}
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("settle %s: %w", stream, err)
		}
	}
	return nil
}

// wfStart queues the start script for one start message: the run's id is the order's id.
func (b *bench) wfStart(ctx context.Context, p redis.Pipeliner, prefix string, m redis.XMessage, now time.Time, ms string) {
	input, _ := m.Values["payload"].(string)
	id := wfOrderID(input)
	run := prefix + ":run:" + id
	wfStartScript.EvalSha(ctx, p,
		[]string{run, prefix + ":hist:" + id, prefix + ":runs", prefix + ":active", prefix + ":s:" + wfSteps[0], prefix + ":start"},
		id, input, ms, wfEvent("", 0, "started", now), "g", m.ID, wfSteps[0])
}

// wfStep queues the step script for one message of step k.
func (b *bench) wfStep(ctx context.Context, p redis.Pipeliner, prefix string, k int, m redis.XMessage, now time.Time, ms string) {
	id, _ := m.Values["run"].(string)
	visit, _ := m.Values["visit"].(string)
	v, _ := strconv.Atoi(visit)
	step := wfSteps[k]
	this := prefix + ":s:" + step
	next, nextStream := "", this
	if k+1 < len(wfSteps) {
		next, nextStream = wfSteps[k+1], prefix+":s:"+wfSteps[k+1]
	}
	finished := `["` + strings.Join(wfSteps[:k+1], `","`) + `"]`
	wfStepScript.EvalSha(ctx, p,
		[]string{prefix + ":run:" + id, prefix + ":out:" + id, prefix + ":hist:" + id, prefix + ":active", this, nextStream},
		id, visit, step, `"`+step+`"`, wfEvent(step, v, "ack", now), next, ms, "g", m.ID, finished,
		wfEvent("", v, "completed", now), int64(wfRetention/time.Second))
}

// wfOrderID reads the id of an order payload ({"id":17,...}) without decoding the rest.
func wfOrderID(payload string) string {
	_, rest, _ := strings.Cut(payload, `"id":`)
	end := strings.IndexAny(rest, ",}")
	if end < 0 {
		return rest
	}
	return rest[:end]
}
