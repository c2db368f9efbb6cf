package redisstream

import (
	"bytes"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

func TestDelayedMemberRoundTrip(t *testing.T) {
	bin := []byte{0, 1, 0x1f, '"', '\\', 0x7f, 0x80, 0xff, 0xfe, 'z', '\n'}
	tests := []struct {
		name string
		msg  *engine.Message
	}{
		{"json payload", &engine.Message{Headers: map[string]string{"x-retry-count": "2", "tenant": "é"}, Payload: []byte(`{"a":"b\"c"}`)}},
		{"binary payload and header", &engine.Message{Headers: map[string]string{"k\x00": string(bin)}, Payload: bin}},
		{"headers only", &engine.Message{Headers: map[string]string{"id": "7", "amount": "12"}}},
		{"empty", &engine.Message{Headers: map[string]string{}}},
	}
	e := newEnv(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			member := encodeDelayed("s", "1-1", tt.msg)
			d, err := DecodeDelayed(member)
			if err != nil {
				t.Fatal(err)
			}
			if d.Key != "s" || d.OriginalID != "1-1" || !bytes.Equal(d.Message.Payload, tt.msg.Payload) ||
				!maps.Equal(d.Message.Headers, tt.msg.Headers) {
				t.Fatalf("decoded %+v %+v, want %+v", d, d.Message, tt.msg)
			}
			// The Lua side (cjson) must rebuild the same fields byte for byte.
			stream := fmt.Sprintf("rt%d", i)
			e.rdb.ZAdd(e.ctx, stream+":z", redis.Z{Score: 1, Member: member})
			if err := moveDueScript.Run(e.ctx, e.rdb, []string{stream + ":z", stream}, 10, MoveBatch).Err(); err != nil {
				t.Fatal(err)
			}
			entries := e.xrange(stream)
			if len(entries) != 1 {
				t.Fatalf("moved %d entries", len(entries))
			}
			want := codec.StreamFields(tt.msg)
			got := fieldsOf(entries[0])
			if len(got)*2 != len(want) {
				t.Fatalf("fields %q, want %q", got, want)
			}
			for j := 0; j < len(want); j += 2 {
				if got[want[j]] != want[j+1] {
					t.Fatalf("field %q = %q, want %q", want[j], got[want[j]], want[j+1])
				}
			}
		})
	}
	for _, bad := range []string{"", "{", `{"v":1,"f":["a"]}`, `{"f":[]}`, `{"v":1,"f":["a","b"]} x`, `{"q":1}`} {
		if _, err := DecodeDelayed(bad); err == nil {
			t.Errorf("DecodeDelayed(%q) succeeded", bad)
		}
	}
}

// A durable delay is stored in the zset, moved back when due (not before, and within the
// time a read takes to notice: a read blocks no longer than until the next due copy), and comes
// back as a copy with x-retry-count one higher.
func TestDurableDelayMovesBackOnTime(t *testing.T) {
	e := newEnv(t)
	o := streamOpts("s")
	o.DelayedRetry = DelayDurableZSet
	o.Block = 5 * time.Second // long: the due copy must cut the wait short
	r := e.start(o)
	if !r.src.Capabilities().DurableDelay {
		t.Fatal("durable_zset source without DurableDelay")
	}
	e.xadd("s", "payload", "p", "h", "v")
	d := r.Next(t)
	delay := 700 * time.Millisecond
	due := time.Now().Add(delay)
	r.settle(t, engine.Settlement{Delivery: d, Action: engine.ActDelay, Copy: d.RetryCopy(), Due: due})
	if n := e.rdb.ZCard(e.ctx, "s:delayed").Val(); n != 1 {
		t.Fatalf("zcard = %d, want 1", n)
	}
	if _, ok := e.pendingOf("s", "g", d.ID); ok {
		t.Fatal("original still pending after the delay was stored")
	}
	// The reader is blocked for up to 5s with nothing due; a fresh entry wakes it and from then
	// on it knows the due time (SPEC: within one block).
	e.xadd("s", "payload", "wake")
	w := r.Next(t)
	r.settle(t, ack(w)...)
	c := r.Next(t)
	late := time.Since(due)
	if late < 0 {
		t.Fatalf("copy delivered %s before due", -late)
	}
	if late > 500*time.Millisecond {
		t.Fatalf("copy delivered %s after due", late)
	}
	if c.Headers["x-retry-count"] != "1" || c.Headers["h"] != "v" || string(c.Payload) != "p" || c.Attempt != 2 {
		t.Fatalf("copy %v %q attempt %d", c.Headers, c.Payload, c.Attempt)
	}
	if n := e.rdb.ZCard(e.ctx, "s:delayed").Val(); n != 0 {
		t.Fatalf("zcard after move = %d", n)
	}
}

// Two workers moving due copies at once move each exactly once.
func TestMoveDueExactlyOnce(t *testing.T) {
	e := newEnv(t)
	const n = 1000
	var zs []redis.Z
	for i := range n {
		m := encodeDelayed("s", fmt.Sprintf("%d-0", i+1), &engine.Message{
			Headers: map[string]string{"x-retry-count": "1", "n": fmt.Sprint(i)}, Payload: []byte("p")})
		zs = append(zs, redis.Z{Score: float64(time.Now().UnixMilli() - 1000 + int64(i%7)), Member: m})
	}
	// One member that is not ours: moved back as a bare payload, not lost, not stuck.
	zs = append(zs, redis.Z{Score: 1, Member: "not json"})
	e.rdb.ZAdd(e.ctx, "s:delayed", zs...)
	var srcs []*Source
	for i := range 2 {
		c, _ := e.client()
		o := streamOpts("s")
		o.Consumer = fmt.Sprint("w", i)
		o.DelayedRetry = DelayDurableZSet
		s, err := New(c, o, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, s)
	}
	var wg sync.WaitGroup
	for _, s := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e.rdb.ZCard(e.ctx, "s:delayed").Val() > 0 {
				if err := s.moveDue(e.ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	entries := e.xrange("s")
	if len(entries) != n+1 {
		t.Fatalf("stream has %d entries, want %d", len(entries), n+1)
	}
	seen := map[string]bool{}
	bare := 0
	for _, m := range entries {
		f := fieldsOf(m)
		if f["payload"] == "not json" {
			bare++
			continue
		}
		if seen[f["n"]] || f["x-retry-count"] != "1" {
			t.Fatalf("entry %v moved twice or changed", f)
		}
		seen[f["n"]] = true
	}
	if len(seen) != n || bare != 1 {
		t.Fatalf("distinct copies %d (want %d), bare %d (want 1)", len(seen), n, bare)
	}
	for _, s := range srcs {
		if err := s.moveDue(e.ctx); err != nil {
			t.Fatal(err)
		}
		if s.nextDue.Load() != 0 {
			t.Fatalf("next due %d with an empty queue", s.nextDue.Load())
		}
	}
}

func TestMoveDueReportsNextDue(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	o := streamOpts("s")
	o.DelayedRetry = DelayDurableZSet
	o.DelayKey = "custom:z"
	s, err := New(c, o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour).UnixMilli()
	e.rdb.ZAdd(e.ctx, "custom:z", redis.Z{Score: float64(future), Member: encodeDelayed("s", "1-1", &engine.Message{Payload: []byte("x")})})
	if err := s.moveDue(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.nextDue.Load(); got != future {
		t.Fatalf("next due %d, want %d", got, future)
	}
	if n := e.rdb.XLen(e.ctx, "s").Val(); n != 0 {
		t.Fatalf("moved a copy that is not due: xlen %d", n)
	}
	if b := s.blockFor(); b != o.Block && b != DefaultBlock {
		t.Fatalf("block %s with the next copy an hour away", b)
	}
	s.lowerNextDue(time.Now().Add(100 * time.Millisecond).UnixMilli())
	if b := s.blockFor(); b > 100*time.Millisecond || b < time.Millisecond {
		t.Fatalf("block %s, want at most 100ms", b)
	}
}

func TestNewRefusesCrossSlotDelayKeyInCluster(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{freeAddr(t)}})
	defer cc.Close()
	tests := []struct {
		stream, delayKey string
		wantErr          bool
	}{
		{"orders", "", true},
		{"{orders}", "", false},
		{"{orders}.in", "{orders}.later", false},
		{"orders", "orders", true}, // same key
	}
	for _, tt := range tests {
		t.Run(tt.stream+"|"+tt.delayKey, func(t *testing.T) {
			o := Options{Kind: KindStream, Stream: tt.stream, Group: "g", Consumer: "c",
				DelayedRetry: DelayDurableZSet, DelayKey: tt.delayKey}
			_, err := New(cc, o, zerolog.Nop())
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && tt.delayKey == "" && !strings.Contains(err.Error(), "hash tag") {
				t.Fatalf("error does not mention the hash tag: %v", err)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		wantErr string
	}{
		{"ok stream", Options{Kind: KindStream, Stream: "s", Group: "g", Consumer: "c"}, ""},
		{"unknown kind", Options{Kind: "list", Stream: "s", Group: "g", Consumer: "c"}, "unknown kind"},
		{"missing stream", Options{Kind: KindStream, Group: "g", Consumer: "c"}, "stream is required"},
		{"claiming without min_idle", Options{Kind: KindClaiming, Stream: "s", Group: "g", Consumer: "c"}, "min_idle is required"},
		{"durable on claiming", Options{Kind: KindClaiming, Stream: "s", Group: "g", Consumer: "c", MinIdle: time.Second, DelayedRetry: DelayDurableZSet}, "stream kind only"},
		{"bad delay mode", Options{Kind: KindStream, Stream: "s", Group: "g", Consumer: "c", DelayedRetry: "later"}, "unknown delayed_retry"},
		{"negative batch", Options{Kind: KindStream, Stream: "s", Group: "g", Consumer: "c", Batch: -1}, "batch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			o.setDefaults()
			err := o.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if o.Start != "0" || o.Batch != 100 || o.Block != time.Second || o.DelayedRetry != DelayRuntime {
					t.Fatalf("defaults %+v", o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
