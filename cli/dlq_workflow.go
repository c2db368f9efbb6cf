package cli

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/redisrun"
	"github.com/flowrun/flowrun/transports/streamdlq"
)

// dlqWorkflow is `flowrun dlq list|redrive|purge WORKFLOW` (SPEC §16): the workflow's dead
// letter, each letter a failed step's message with x-run-id; redrive resumes each letter's run
// at the step that failed (runs retry) and deletes the letter.
func dlqWorkflow(ctx context.Context, a *dlqArgs, cfg *config.Config, wf *config.Workflow, stdio Stdio) int {
	if code := a.checkPurge(stdio); code != ExitOK {
		return code
	}
	g, err := graphOf(wf)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: %v\n", a.sub, err)
		return ExitConfig
	}
	conns := newAdminConns(cfg)
	defer conns.close()
	c, err := conns.get(ctx, wf.Redis)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: %v\n", a.sub, err)
		return ExitRuntime
	}
	store := redisrun.NewStore(c, g)
	store.DeadLetter = wf.DeadLetter
	code, err := a.run(ctx, workflowDLQ{s: store, c: c}, conns.env(ctx, wf.Redis), store.DeadLetterKey(), stdio)
	if err == nil && code != ExitOK {
		return code
	}
	a.filter.warn(stdio.Err, a.sub)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: workflow %q: %v\n", a.sub, a.name, conns.redact(wf.Redis, err))
		return ExitRuntime
	}
	return ExitOK
}

// workflowDLQ is a workflow's dead letter as the dlq commands use it: a stream, whose redrive
// is a retry of each letter's run rather than a copy back to a source.
type workflowDLQ struct {
	s *redisrun.Store
	c redis.UniversalClient
}

var _ transports.DeadLetterStore = workflowDLQ{}

func (workflowDLQ) CheckRedrive() error { return nil }

func (d workflowDLQ) ListDeadLetters(ctx context.Context, _ *transports.Env, q transports.DeadLetterQuery) ([]transports.DeadLetter, int64, error) {
	return streamdlq.ListDeadLetters(ctx, d.c, d.s.DeadLetterKey(), q)
}

func (d workflowDLQ) RedriveDeadLetters(ctx context.Context, _ *transports.Env, q transports.DeadLetterQuery) (int, string, error) {
	n, err := d.s.Redrive(ctx, q.Limit, q.Match)
	return n, "their runs, each resumed at the step that failed", err
}

func (d workflowDLQ) PurgeDeadLetters(ctx context.Context, _ *transports.Env, q transports.DeadLetterQuery) (int, error) {
	return streamdlq.Purge(ctx, d.c, d.s.DeadLetterKey(), q.Limit, q.Match)
}
