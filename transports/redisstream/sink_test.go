package redisstream

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
)

func TestSink(t *testing.T) {
	e := newEnv(t)
	s := NewSink(e.rdb)
	err := s.Publish(e.ctx,
		&engine.Message{Key: "done", Headers: map[string]string{"source": "flowrun"}, Payload: []byte(`{"paid":true}`)},
		&engine.Message{Key: "other", Headers: map[string]string{}, Payload: []byte("x")},
		&engine.Message{Key: "done", Headers: map[string]string{"k": "v"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	done := e.xrange("done")
	if len(done) != 2 ||
		!maps.Equal(fieldsOf(done[0]), map[string]string{"source": "flowrun", "payload": `{"paid":true}`}) ||
		!maps.Equal(fieldsOf(done[1]), map[string]string{"k": "v"}) {
		t.Fatalf("done = %v", done)
	}
	if o := e.xrange("other"); len(o) != 1 || fieldsOf(o[0])["payload"] != "x" {
		t.Fatalf("other = %v", o)
	}
	e.rdb.Set(e.ctx, "str", "x", 0)
	err = s.Publish(e.ctx, &engine.Message{Key: "str", Payload: []byte("p")})
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("err = %v, want WRONGTYPE", err)
	}
	if err := s.Publish(e.ctx, &engine.Message{Payload: []byte("p")}); err == nil {
		t.Fatal("emit without key accepted")
	}
}

// BenchmarkSinkPublish publishes emits as a rule set's settle does, 100 a call, each with the
// header it adds: allocations and CPU per message of the pipeline's XADDs.
func BenchmarkSinkPublish(b *testing.B) {
	_, rdb := redistest.Fresh(b)
	ctx := context.Background()
	s := NewSink(rdb)
	msgs := make([]*engine.Message, 100)
	for i := range msgs {
		msgs[i] = &engine.Message{Key: "out", Headers: map[string]string{"routed": "yes"},
			Payload: []byte(`{"id":1,"amount":37.5,"currency":"USD","customer":"c01"}`)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Publish(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
}
