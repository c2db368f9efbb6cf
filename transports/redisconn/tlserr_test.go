package redisconn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/internal/redistest"
)

// TestPingTLSToPlaintextPort: a rediss:// client pointed at a plaintext server fails its ping
// with a PlaintextPortError, which TLSProblem names and IsConfigError counts as a configuration
// problem; a plain client of a server that is down gets no such error.
func TestPingTLSToPlaintextPort(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "pw")
	c, err := New(Options{URL: "rediss://" + srv.Addr + "/0", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = Ping(ctx, c)
	var pe *PlaintextPortError
	if !errors.As(err, &pe) || pe.Addr != srv.Addr {
		t.Fatalf("Ping = %v, want a PlaintextPortError for %s", err, srv.Addr)
	}
	if p, ok := TLSProblem(err); !ok || p != PlaintextProblem || !IsConfigError(err) {
		t.Fatalf("TLSProblem = %q, %v; IsConfigError %v", p, ok, IsConfigError(err))
	}
	if answersPlaintext("127.0.0.1:1") {
		t.Error("a closed port answers in plaintext")
	}
	if err := probePlaintext(srv.Client(t), errors.New("x")); err != nil {
		t.Errorf("a client without TLS was probed: %v", err)
	}
}
