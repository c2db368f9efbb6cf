package redisrun

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/workflow"
)

func TestMain(m *testing.M) {
	redisconn.SetDriverLogger(zerolog.Nop())
	os.Exit(redistest.Main(m))
}

// env is one test's Redis (the package's shared server, emptied) and a store of testGraph.
type env struct {
	t   *testing.T
	srv *redistest.Server
	rdb *redis.Client
	ctx context.Context
	s   *Store
	k   keys
}

// testGraph: reserve -> charge (compensated by release), then the run completes.
func testGraph() *workflow.Graph {
	return &workflow.Graph{
		Name:      "order",
		OnFailure: "compensate",
		Retention: time.Hour,
		Steps: []workflow.StepDef{
			{Name: "reserve", Next: "charge", Compensate: "release"},
			{Name: "charge", Timeout: time.Minute},
			{Name: "release"},
		},
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv, rdb := redistest.Fresh(t)
	c := srv.Client(t)
	g := testGraph()
	return &env{t: t, srv: srv, rdb: rdb, ctx: context.Background(), s: NewStore(c, g), k: newKeys(g.Name)}
}

func (e *env) hgetall(key string) map[string]string {
	e.t.Helper()
	m, err := e.rdb.HGetAll(e.ctx, key).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) xrange(key string) []redis.XMessage {
	e.t.Helper()
	m, err := e.rdb.XRange(e.ctx, key, "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) zrange(key string) []redis.Z {
	e.t.Helper()
	z, err := e.rdb.ZRangeWithScores(e.ctx, key, 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return z
}

func (e *env) llen(key string) int64 {
	e.t.Helper()
	n, err := e.rdb.LLen(e.ctx, key).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) pttl(key string) time.Duration {
	e.t.Helper()
	d, err := e.rdb.PTTL(e.ctx, key).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *env) waitFor(what string, timeout time.Duration, cond func() bool) {
	e.t.Helper()
	if !redistest.WaitFor(e.ctx, timeout, cond) {
		e.t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

func fields(m redis.XMessage) map[string]string {
	out := make(map[string]string, len(m.Values))
	for k, v := range m.Values {
		out[k] = v.(string)
	}
	return out
}

// create writes run id by hand (as Graph.Start would): status running, at reserve, visit 1.
func (e *env) create(id string, now time.Time) {
	e.t.Helper()
	st := &workflow.State{ID: id, Workflow: "order", Status: workflow.Running, Step: "reserve", Visit: 1,
		Input: []byte(`{"sku":"a"}`), StartedAt: now, UpdatedAt: now, Fingerprint: "fp1"}
	t := workflow.Transition{Run: id, Visit: 0, Status: workflow.Running, Enter: "reserve", At: now,
		History: []workflow.Event{{Outcome: workflow.EventStarted, At: now}}}
	ok, err := e.s.Create(e.ctx, st, t)
	if err != nil || !ok {
		e.t.Fatalf("create %s: %v %v", id, ok, err)
	}
}
