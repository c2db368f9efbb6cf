package redisconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/internal/redistest"
)

// TestTLS runs against a real redis-server listening with TLS: rediss:// with the CA, redis://
// with a tls {} block, a client certificate where the server requires one, and a CA that does
// not match.
func TestTLS(t *testing.T) {
	srv, f := redistest.StartTLS(t)
	addr := srv.TLSAddr
	other := redistest.WriteTLSFiles(t, t.TempDir()) // a different CA

	tests := []struct {
		name    string
		opts    Options
		ok      bool
		problem string // TLSProblem of the failure
	}{
		{"rediss url with ca and client cert", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}}, true, ""},
		{"redis url with a tls block", Options{URL: "redis://" + addr, TLS: &TLSOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}}, true, ""},
		{"server name from the block", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, ServerName: "localhost"}}, true, ""},
		{"no client certificate", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: f.CA}}, false, "requires a client certificate"},
		{"unknown CA", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: other.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}}, false, "authority that is not trusted"},
		{"name mismatch", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, ServerName: "redis.example.com"}}, false, `does not match the name "redis.example.com"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = Ping(ctx, c)
			if tt.ok && err != nil {
				t.Fatalf("over TLS: %v", err)
			}
			if !tt.ok && err == nil {
				t.Fatal("connected, want a TLS failure")
			}
			problem, isTLS := TLSProblem(err)
			if isTLS != !tt.ok || !strings.Contains(problem, tt.problem) || IsConfigError(err) != !tt.ok {
				t.Fatalf("TLSProblem(%v) = %q, %v; want one naming %q", err, problem, isTLS, tt.problem)
			}
		})
	}
}

// TestTLSProbeFindsTheAlert: a ping whose write met a reset before the server's TLS alert was
// read ("certificate required" comes after the TLS 1.3 handshake) is probed again, and the
// probe names the alert rather than leaving it for an unreachable server; a client the server
// accepts probes to nothing.
func TestTLSProbeFindsTheAlert(t *testing.T) {
	srv, f := redistest.StartTLS(t)
	reset := fmt.Errorf("write: %w", syscall.ECONNRESET)
	for _, tt := range []struct {
		name, problem string
		tls           *TLSOptions
	}{
		{"no client certificate", "requires a client certificate", &TLSOptions{CAFile: f.CA}},
		{"accepted", "", &TLSOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Options{URL: "rediss://" + srv.TLSAddr, TLS: tt.tls})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = probePlaintext(c, reset)
			problem, _ := TLSProblem(err)
			if tt.problem == "" && err != nil || !strings.Contains(problem, tt.problem) {
				t.Fatalf("probe = %v (%q), want one naming %q", err, problem, tt.problem)
			}
		})
	}
}

func TestTLSProblemOthers(t *testing.T) {
	for _, err := range []error{
		nil,
		errors.New("WRONGPASS invalid username-password pair"),
		fmt.Errorf("ping: %w", syscall.ECONNREFUSED),
		context.DeadlineExceeded,
	} {
		if p, ok := TLSProblem(err); ok {
			t.Errorf("TLSProblem(%v) = %q, want not a TLS error", err, p)
		}
	}
}
