// Package redisrun keeps workflow runs in Redis (SPEC §16): the run records, the step streams,
// the delayed step messages and the timeouts of a workflow, all under flowrun:{<workflow>}: so
// they share one hash slot and every transition is one script. It applies what package
// workflow decides and decides nothing itself.
package redisrun

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// Store is one workflow's runs in one Redis. It implements workflow.Store.
type Store struct {
	c redis.UniversalClient
	g *workflow.Graph
	k keys
	// OnDone, when set, is called once for each run this process ended (metrics).
	OnDone func(st workflow.Status, took time.Duration)
}

var _ workflow.Store = (*Store)(nil)

// NewStore returns the store of g's runs in c; c is the caller's and is never closed here.
func NewStore(c redis.UniversalClient, g *workflow.Graph) *Store {
	return &Store{c: c, g: g, k: newKeys(g.Name)}
}

// StepOptions configure a step's source.
type StepOptions struct {
	Consumer string        // this process's consumer name in the step stream's group
	Batch    int           // entries per read (default 100)
	Block    time.Duration // how long a read blocks (default 1s)
	MinIdle  time.Duration // a delivery pending this long in a dead consumer is taken over (default 1m)
}

// StepSource returns the source of one step's visits: it reads the step's stream, loads each
// delivery's run into engine.Run (State a *workflow.Visit) and settles a visit with one script.
func (s *Store) StepSource(step string, o StepOptions, log zerolog.Logger) engine.Source {
	panic("redisrun: StepSource not built yet")
}

// StartHandler returns the handler of the workflow's start pipeline: it creates the run named by
// runID (the start delivery's own id when runID is nil) and enters the first step, or answers
// Duplicate when the run exists.
func (s *Store) StartHandler(runID func(d *engine.Delivery) (string, error), fingerprint string) engine.Handler {
	panic("redisrun: StartHandler not built yet")
}

// RunTimers fires due timeouts and moves due delayed step messages, about every second, until
// ctx ends. Every process running the workflow runs it; the visit check makes that safe.
func (s *Store) RunTimers(ctx context.Context, log zerolog.Logger) error {
	panic("redisrun: RunTimers not built yet")
}
