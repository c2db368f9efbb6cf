// Package redisrun keeps workflow runs in Redis (SPEC §16): the run records, the step streams,
// the delayed step messages and the timeouts of a workflow, all under flowrun:{<workflow>}: so
// they share one hash slot and every transition is one script. It applies what package
// workflow decides and decides nothing itself.
package redisrun

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// Store is one workflow's runs in one Redis. It implements workflow.Store.
type Store struct {
	c redis.UniversalClient
	g *workflow.Graph
	k keys
	// OnDone, when set, is called once for each run this process ended (metrics): the run's
	// final status and how long it ran, from its start to this end.
	OnDone func(st workflow.Status, took time.Duration)
	// OnRejected, when set, is called once for each kept event of a wait step that expired
	// without its run (counted rejected on the wait's pipeline).
	OnRejected func(step string)
	// Tracer, when set (tracing is on), traces runs (SPEC §14): a new run keeps its trace
	// context in its record (field trace), each step message carries the run span's
	// traceparent, and the process that ends a run exports its span.
	Tracer engine.RunTracer
	// DeadLetter is the workflow's dead letter as configured, for the dead-letter tools
	// (DeadLetters, Redrive); "" is the default, flowrun:{<workflow>}:dead.
	DeadLetter string

	creates committer // start handlers' creations, sent together
	known   knownRuns // runs this process moved into a pure step
	fixed   fixedArgs // applyScript's keys and arguments that never change
}

var _ workflow.Store = (*Store)(nil)

// NewStore returns the store of g's runs in c; c is the caller's and is never closed here.
func NewStore(c redis.UniversalClient, g *workflow.Graph) *Store {
	s := &Store{c: c, g: g, k: newKeys(g.Name)}
	s.initFixed()
	return s
}

// StepOptions configure a step's source.
type StepOptions struct {
	Consumer string        // this process's consumer name in the step stream's group
	Batch    int           // entries per read (default 100)
	Block    time.Duration // how long a read blocks (default 1s)
	MinIdle  time.Duration // a delivery pending this long in a dead consumer is taken over (default 1m)
	// Linger is how long a read that found only a few entries (under a quarter of Batch) waits
	// before the next: the step before settles in small batches, and reading each as it lands
	// costs a read, a load and a settlement round trip per handful (default 2ms; < 0 none).
	Linger time.Duration
	// SkipInput and SkipSteps leave the run's input undecoded (engine.Run.Input nil) and its
	// outputs unread (Run.Steps nil), for a step whose expressions read neither.
	SkipInput, SkipSteps bool
	// Pure says the step's handler has no effect but its outcome (rules alone: no emit, no
	// flow block, no timeout): a visit this process entered starts from the run as its
	// transition left it, without a load (knownRuns).
	Pure bool
}
