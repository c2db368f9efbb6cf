package redisstream

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

func TestTracker(t *testing.T) {
	now := time.Now()
	tr := newTracker(DefaultBatch)
	addIDs(tr, "a", "b", "c", "d")
	tr.hold("b", now.Add(time.Minute), now)  // held
	tr.hold("c", now.Add(-time.Second), now) // hold already over: released
	tr.hold("d", now.Add(time.Millisecond), now)
	later := now.Add(time.Second)
	got := tr.alive(later, 0) // d's hold ran out: one last refresh, then released
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("alive = %v, want [a b d]", got)
	}
	if tr.has("c") || tr.has("d") {
		t.Fatal("released ids still tracked")
	}
	// b is claimed by another consumer: a held id is simply released; a is in flight: marked
	// lost once, no longer kept alive, still tracked for its settlement.
	if newly := tr.lose([]string{"a", "b"}); !slices.Equal(newly, []string{"a"}) {
		t.Fatalf("lose = %v, want [a]", newly)
	}
	if newly := tr.lose([]string{"a"}); len(newly) != 0 {
		t.Fatalf("second lose = %v, want none", newly)
	}
	if !tr.has("a") || tr.has("b") {
		t.Fatal("lose: a must stay, b must go")
	}
	if got := tr.alive(later, 0); len(got) != 0 {
		t.Fatalf("alive after lose = %v", got)
	}
	addIDs(tr, "e")
	tr.hold("f", later.Add(time.Minute), later)
	tr.gone([]string{"e", "f"}) // not pending any more: held f released, in-flight e kept
	if !tr.has("e") || tr.has("f") {
		t.Fatal("gone: e must stay, f must go")
	}
	tr.remove([]string{"a", "e"})
	if tr.len() != 0 {
		t.Fatalf("len = %d", tr.len())
	}
}

// An in-flight id read less than fresh ago has nothing for the keep-alive to reset yet; a held
// one is kept alive whatever its age.
func TestTrackerLeavesYoungEntries(t *testing.T) {
	tr := newTracker(DefaultBatch)
	addIDs(tr, "young", "held")
	now := time.Now()
	tr.hold("held", now.Add(time.Minute), now)
	if got := tr.alive(now, time.Minute); !slices.Equal(got, []string{"held"}) {
		t.Fatalf("alive = %v, want [held]", got)
	}
	got := tr.alive(now.Add(time.Minute), time.Minute)
	slices.Sort(got)
	if !slices.Equal(got, []string{"held", "young"}) {
		t.Fatalf("alive a minute on = %v, want [held young]", got)
	}
}

// Connections dropped again and again while entries flow and settle: every entry is handed out
// exactly once (the pending re-read after each reconnect skips what is in flight or was just
// settled) and nothing stays pending.
func TestNoDuplicatesUnderReconnects(t *testing.T) {
	e := newOwnEnv(t)
	const n = 3000
	e.xaddN("s", n)
	o := streamOpts("s")
	o.Batch = 50
	r := e.start(o)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				e.rdb.Do(e.ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
			}
		}
	}()
	seen := map[string]int{}
	deadline := time.After(60 * time.Second)
	var sts []engine.Settlement
	for len(seen) < n {
		select {
		case d := <-r.Out():
			seen[d.ID]++
			if seen[d.ID] > 1 {
				close(stop)
				wg.Wait()
				t.Fatalf("%s delivered twice", d.ID)
			}
			sts = append(sts, engine.Settlement{Delivery: d, Action: engine.ActAck})
			if len(sts) == 17 {
				// A failed settlement is re-sent, as the engine does.
				for r.src.Settle(e.ctx, sts) != nil {
				}
				sts = sts[:0]
			}
		case <-deadline:
			close(stop)
			wg.Wait()
			t.Fatalf("saw %d of %d entries", len(seen), n)
		}
	}
	close(stop)
	wg.Wait()
	for r.src.Settle(e.ctx, sts) != nil {
	}
	e.waitFor("no pending entries", 5*time.Second, func() bool { return e.pending("s", "g") == 0 })
	r.None(t, 300*time.Millisecond)
}

// settleDuringReread is a hook that settles a delivery right after the pending re-read's
// XREADGROUP returned and before the source filters the reply: the race the re-read must win.
type settleDuringReread struct {
	recorder
	once sync.Once
	fn   func()
}

func (h *settleDuringReread) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if cmd.Name() == "xreadgroup" && args[len(args)-1] != ">" {
			h.once.Do(h.fn)
		}
		return err
	}
}

func TestPendingRereadIgnoresEntrySettledMeanwhile(t *testing.T) {
	e := newOwnEnv(t)
	id := e.xadd("s", "payload", "p")
	c := e.srv.NewClient()
	defer c.Close()
	src, err := New(c, streamOpts("s"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r := e.run(src, nil)
	d := r.Next(t)
	if d.ID != id {
		t.Fatalf("got %s", d.ID)
	}
	settled := make(chan error, 1)
	c.AddHook(&settleDuringReread{fn: func() { settled <- src.Settle(context.Background(), ack(d)) }})
	e.killClients() // reconnect: the source re-reads its pending entries
	select {
	case err := <-settled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pending re-read after the reconnect")
	}
	r.None(t, 500*time.Millisecond)
	if n := e.pending("s", "g"); n != 0 {
		t.Fatalf("pending = %d", n)
	}
}

// addIDs tracks deliveries of ids, as a read does.
func addIDs(tr *tracker, ids ...string) {
	ds := make([]*engine.Delivery, len(ids))
	for i, id := range ids {
		ds[i] = &engine.Delivery{Message: engine.Message{ID: id}}
	}
	tr.addDeliveries(ds)
}
