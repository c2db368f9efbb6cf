package redisconn

import (
	"context"
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
		name string
		opts Options
		ok   bool
	}{
		{"rediss url with ca and client cert", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}}, true},
		{"redis url with a tls block", Options{URL: "redis://" + addr, TLS: &TLSOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}}, true},
		{"server name from the block", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, ServerName: "localhost"}}, true},
		{"no client certificate", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: f.CA}}, false},
		{"unknown CA", Options{URL: "rediss://" + addr, TLS: &TLSOptions{CAFile: other.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}}, false},
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
			err = c.Set(ctx, "k", "v", 0).Err()
			if tt.ok && err != nil {
				t.Fatalf("over TLS: %v", err)
			}
			if !tt.ok && err == nil {
				t.Fatal("connected, want a TLS failure")
			}
		})
	}
}
