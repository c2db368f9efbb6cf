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

// TestRedisTLSFailuresExit2: a TLS handshake that fails at start is a configuration problem,
// like a wrong password (SPEC §10): flowrun exits 2 within seconds naming what is wrong, never
// waits for it to pass, never falls back to plaintext and never prints the password.
func TestRedisTLSFailuresExit2(t *testing.T) {
	t.Parallel()
	const pw = "tls-s3cret-pw"
	srv, files := redistest.StartTLS(t, "--requirepass", pw)
	other := redistest.WriteTLSFiles(t, t.TempDir()) // a CA that did not sign the server's certificate
	pipeline := `
pipeline "secure" {
  source "stream" {
    stream = "secure"
    block  = "100ms"
  }
  rule "ok" {
    outcome = "ack"
  }
}
`
	cases := []struct {
		name, tls, want string
	}{
		{"untrusted CA", fmt.Sprintf("ca_file = %q\n    cert_file = %q\n    key_file = %q", other.CA, files.ClientCert, files.ClientKey),
			"authority that is not trusted"},
		{"name mismatch", fmt.Sprintf("ca_file = %q\n    cert_file = %q\n    key_file = %q\n    server_name = \"redis.example.com\"", files.CA, files.ClientCert, files.ClientKey),
			`certificate does not match the name \"redis.example.com\"`},
		{"missing client certificate", fmt.Sprintf("ca_file = %q", files.CA),
			"requires a client certificate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := writeFile(t, t.TempDir(), "tls.hcl", fmt.Sprintf(`redis "main" {
  url      = "rediss://%s/0"
  password = %q
  tls {
    %s
  }
}
%s`, srv.TLSAddr, pw, c.tls, pipeline))
			began := time.Now()
			r := flowrun(t, "", "run", cfg)
			took := time.Since(began)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", r.code, r.stderr)
			}
			if took > 10*time.Second {
				t.Errorf("exited after %s, want within a few seconds", took)
			}
			if !strings.Contains(r.stderr, `redis \"main\": TLS handshake failed`) || !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr does not name the TLS problem (%s):\n%s", c.want, r.stderr)
			}
			if strings.Contains(r.stderr, "not reachable") {
				t.Errorf("a TLS failure was taken for an unreachable server:\n%s", r.stderr)
			}
			if strings.Contains(r.stderr+r.stdout, pw) {
				t.Errorf("the password is in the output:\n%s", r.stderr)
			}
			t.Logf("exit 2 after %s", took.Round(time.Millisecond))
		})
	}
}

// TestRedisTLSToPlaintextPortExit2: a rediss:// url pointed at a plaintext redis-server (with a
// password, so its plain answer is -NOAUTH) is a configuration problem at start: run, inspect
// and dlq list exit 2 within seconds, naming it, and never take it for a server to wait for.
func TestRedisTLSToPlaintextPortExit2(t *testing.T) {
	t.Parallel()
	const pw = "plain-s3cret-pw"
	srv := redistest.Start(t, "--requirepass", pw)
	cfg := writeFile(t, t.TempDir(), "plain.hcl", fmt.Sprintf(`redis "main" {
  url      = "rediss://%s/0"
  password = %q
}

pipeline "jobs" {
  source "list" {
    key   = "jobs"
    block = "100ms"
  }
  dead_letter = "jobs.dlq"
  rule "ok" {
    outcome = "ack"
  }
}
`, srv.Addr, pw))
	for _, args := range [][]string{{"run", cfg}, {"inspect", cfg}, {"dlq", "list", "jobs", cfg}} {
		t.Run(args[0], func(t *testing.T) {
			began := time.Now()
			r := flowrun(t, "", args...)
			took := time.Since(began)
			if r.code != 2 {
				t.Fatalf("flowrun %s exited %d, want 2; stderr:\n%s", args[0], r.code, r.stderr)
			}
			if took > 10*time.Second {
				t.Errorf("exited after %s, want within a few seconds", took)
			}
			const want = "the server did not answer the TLS handshake: is it a plaintext port?"
			if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, `redis \"main\"`) && !strings.Contains(r.stderr, `redis "main"`) {
				t.Errorf("stderr does not name the redis block and the problem (%q):\n%s", want, r.stderr)
			}
			if strings.Contains(r.stderr, "flowrun started") || strings.Contains(r.stderr, "not reachable") {
				t.Errorf("the plaintext port was taken for a server to wait for:\n%s", r.stderr)
			}
			if strings.Contains(r.stderr+r.stdout, pw) {
				t.Errorf("the password is in the output:\n%s", r.stderr)
			}
			t.Logf("%s: exit 2 after %s", args[0], took.Round(time.Millisecond))
		})
	}
}
