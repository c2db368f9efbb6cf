package redisstream

import (
	"maps"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/engine"
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
