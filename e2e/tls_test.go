package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// TestRedisOverTLS runs a stream pipeline over rediss:// with a client certificate and an ACL
// password: tls {} paths are relative to the HCL file, and the password is never logged.
func TestRedisOverTLS(t *testing.T) {
	srv, files := redistest.StartTLS(t, "--requirepass", "s3cret-pw")
	dir := t.TempDir()
	for name, src := range map[string]string{"ca.pem": files.CA, "client.pem": files.ClientCert, "client-key.pem": files.ClientKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "certs"), name, string(b))
	}
	cfg := writeFile(t, dir, "tls.hcl", fmt.Sprintf(`redis "main" {
  url      = "rediss://%s/0"
  password = "s3cret-pw"
  tls {
    ca_file   = "certs/ca.pem"
    cert_file = "certs/client.pem"
    key_file  = "certs/client-key.pem"
  }
}

pipeline "secure" {
  source "stream" {
    stream = "secure"
    block  = "100ms"
  }
  rule "ok" {
    emit "stream" {
      key = "secure.done"
    }
    outcome = "ack"
  }
}
`, srv.TLSAddr))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret-pw"})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	for i := range 3 {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "secure", Values: []string{"payload", fmt.Sprint(i)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p := start(t, "run", "--log-level", "debug", cfg)
	eventually(t, 15*time.Second, "three entries handled over TLS", func() bool {
		n, _ := rdb.XLen(ctx, "secure.done").Result()
		return n == 3
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.err.String())
	}
	if pending, _ := rdb.XPending(ctx, "secure", "secure").Result(); pending.Count != 0 {
		t.Errorf("%d entries pending after the run", pending.Count)
	}
	if strings.Contains(p.err.String(), "s3cret-pw") {
		t.Errorf("the password appears in the logs:\n%s", p.err.String())
	}
}
