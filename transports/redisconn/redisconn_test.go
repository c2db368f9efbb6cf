package redisconn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/internal/redistest"
)

func TestNewOptions(t *testing.T) {
	tests := []struct {
		name     string
		opts     Options
		wantErr  string
		addr     string
		network  string
		user     string
		password string
		db       int
		tls      bool
	}{
		{name: "redis url", opts: Options{URL: "redis://127.0.0.1:7000/3"},
			addr: "127.0.0.1:7000", network: "tcp", db: 3},
		{name: "url credentials", opts: Options{URL: "redis://bob:pw@h:1/0"},
			addr: "h:1", network: "tcp", user: "bob", password: "pw"},
		{name: "block credentials override url", opts: Options{URL: "redis://bob:pw@h:1/0", Username: "alice", Password: "s3"},
			addr: "h:1", network: "tcp", user: "alice", password: "s3"},
		{name: "rediss", opts: Options{URL: "rediss://h:6380"}, addr: "h:6380", network: "tcp", tls: true},
		{name: "tls block on redis url", opts: Options{URL: "redis://h:6380", TLS: &TLSOptions{ServerName: "x"}},
			addr: "h:6380", network: "tcp", tls: true},
		{name: "unix", opts: Options{URL: "unix:///tmp/r.sock?db=2"}, addr: "/tmp/r.sock", network: "unix", db: 2},
		{name: "nothing set", opts: Options{}, wantErr: "exactly one of url, cluster or sentinel"},
		{name: "url and cluster", opts: Options{URL: "redis://h:1", Cluster: []string{"h:2"}}, wantErr: "exactly one"},
		{name: "sentinel without addrs", opts: Options{SentinelMaster: "m"}, wantErr: "sentinel needs both"},
		{name: "bad scheme", opts: Options{URL: "http://h:1"}, wantErr: "parse url"},
		{name: "half a client cert", opts: Options{URL: "redis://h:1", TLS: &TLSOptions{CertFile: "c.pem"}}, wantErr: "both cert_file and key_file"},
		{name: "missing ca", opts: Options{URL: "redis://h:1", TLS: &TLSOptions{CAFile: "/nonexistent/ca.pem"}}, wantErr: "read ca_file"},
		{name: "tls over unix", opts: Options{URL: "unix:///tmp/r.sock", TLS: &TLSOptions{}}, wantErr: "unix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := c.(*redis.Client).Options()
			if o.Addr != tt.addr || o.Network != tt.network || o.Username != tt.user ||
				o.Password != tt.password || o.DB != tt.db || (o.TLSConfig != nil) != tt.tls {
				t.Fatalf("options = addr %q network %q user %q password %q db %d tls %v",
					o.Addr, o.Network, o.Username, o.Password, o.DB, o.TLSConfig != nil)
			}
			if o.PoolSize < MinPoolSize {
				t.Fatalf("pool size %d < %d", o.PoolSize, MinPoolSize)
			}
		})
	}
}

func TestNewClusterAndSentinel(t *testing.T) {
	c, err := New(Options{Cluster: []string{"127.0.0.1:1", "127.0.0.1:2"}, Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("cluster client is %T", c)
	}
	if got := cc.Options().Addrs; len(got) != 2 || cc.Options().Password != "p" {
		t.Fatalf("cluster options: addrs %v password %q", got, cc.Options().Password)
	}
	cc.Close()

	s, err := New(Options{SentinelMaster: "m", SentinelAddrs: []string{"127.0.0.1:1"}, Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*redis.Client); !ok {
		t.Fatalf("sentinel client is %T", s)
	}
	s.Close()
}

func TestParseErrorRedacted(t *testing.T) {
	_, err := New(Options{URL: "redis://u:hunter2@h:1/0/x%zz"})
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("password in error: %v", err)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		secrets []string
		want    string
	}{
		{"plain secret", "auth failed for s3cret", []string{"s3cret"}, "auth failed for xxxxx"},
		{"empty secret ignored", "abc", []string{""}, "abc"},
		{"url userinfo without known secret", "dial redis://bob:pw@h:1/0 failed", nil, "dial redis://bob:xxxxx@h:1/0 failed"},
		{"escaped secret", "redis://:p%40ss@h", []string{"p@ss"}, "redis://:xxxxx@h"},
		{"two secrets", "a=one b=two", []string{"one", "two"}, "a=xxxxx b=xxxxx"},
		{"no userinfo", "redis://h:1/0", nil, "redis://h:1/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Redact(tt.in, tt.secrets...); got != tt.want {
				t.Fatalf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRedactErrorKeepsChain(t *testing.T) {
	base := errors.New("WRONGPASS invalid username-password pair for pw123")
	err := RedactError(fmt.Errorf("x: %w", base), "pw123")
	if strings.Contains(err.Error(), "pw123") {
		t.Fatalf("not redacted: %v", err)
	}
	if !errors.Is(err, base) || !IsAuthError(err) {
		t.Fatalf("chain lost: Is=%v auth=%v", errors.Is(err, base), IsAuthError(err))
	}
	if RedactError(nil, "x") != nil {
		t.Fatal("RedactError(nil) != nil")
	}
}

func TestAuthAgainstServer(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "right-pw")
	ctx := context.Background()
	tests := []struct {
		name     string
		password string
		auth     bool
	}{
		{"no password", "", true},
		{"wrong password", "wrong-pw", true},
		{"right password", "right-pw", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Options{URL: srv.URL, Password: tt.password})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = Ping(ctx, c)
			if got := IsAuthError(err); got != tt.auth {
				t.Fatalf("IsAuthError(%v) = %v, want %v", err, got, tt.auth)
			}
			if err != nil && strings.Contains(err.Error(), "wrong-pw") {
				t.Fatalf("password in error: %v", err)
			}
		})
	}
	if IsAuthError(errors.New("dial tcp: connection refused")) {
		t.Fatal("a dial error is not an auth error")
	}
}

func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "r.sock")
	redistest.Start(t, "--unixsocket", sock)
	c, err := New(Options{URL: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := Ping(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

func TestSlot(t *testing.T) {
	// Reference values from CLUSTER KEYSLOT.
	tests := []struct {
		key  string
		slot int
	}{
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"123456789", 12739},
		{"foo{}{bar}", 8363},    // empty first tag: whole key
		{"foo{{bar}}zap", 4015}, // tag is "{bar"
		{"", 0},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := Slot(tt.key); got != tt.slot {
				t.Fatalf("Slot(%q) = %d, want %d", tt.key, got, tt.slot)
			}
		})
	}
}

func TestSlotMatchesServer(t *testing.T) {
	// CLUSTER KEYSLOT needs cluster mode, but not assigned slots.
	srv := redistest.Start(t, "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"))
	c := srv.Client(t)
	for _, k := range []string{"orders", "orders:delayed", "{orders}:delayed", "a{b}c", "x{}y", "payouts.dlq", "é{ü}"} {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); int64(got) != want {
			t.Fatalf("Slot(%q) = %d, server says %d", k, got, want)
		}
	}
}

func TestSameSlot(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	tests := []struct {
		name string
		c    redis.UniversalClient
		a, b string
		want bool
	}{
		{"standalone always", single, "orders", "orders:delayed", true},
		{"cluster different slots", cluster, "orders", "orders:delayed", false},
		{"cluster hash tags", cluster, "{orders}", "{orders}:delayed", true},
		{"cluster same key", cluster, "orders", "orders", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SameSlot(tt.c, tt.a, tt.b); got != tt.want {
				t.Fatalf("SameSlot(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Cap: time.Second}
	ceilings := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, ceil := range ceilings {
		ceil *= time.Millisecond
		for range 50 { // the draw is random: check the bounds many times
			c := b
			d := c.Next()
			if d < 100*time.Millisecond || d > ceil {
				t.Fatalf("wait %d = %s, want within [100ms, %s]", i, d, ceil)
			}
		}
		b.Next()
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("first wait after Reset = %s, want 100ms", d)
	}
	// SPEC §10 bounds recovery at 10 s after Redis is back: a loop at the cap must try again
	// well within that.
	if DefaultBackoffCap > 3*time.Second {
		t.Fatalf("DefaultBackoffCap = %s: too long for the 10 s recovery bound", DefaultBackoffCap)
	}
	var z Backoff
	for range 100 {
		if d := z.Next(); d < DefaultBackoffBase || d > DefaultBackoffCap {
			t.Fatalf("default backoff wait %s out of bounds", d)
		}
	}
}

func TestSleep(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want bool
	}{
		{"duration passes", context.Background(), time.Millisecond, true},
		{"context ends first", canceled, time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			if got := Sleep(tt.ctx, tt.d); got != tt.want {
				t.Fatalf("Sleep = %v, want %v", got, tt.want)
			}
			if el := time.Since(start); tt.want && el < tt.d || !tt.want && el > time.Minute {
				t.Fatalf("Sleep took %s", el)
			}
		})
	}
}

func TestStateLog(t *testing.T) {
	var buf bytes.Buffer
	s := NewStateLog(zerolog.New(&buf), "read", "pw")
	s.OK() // up already: nothing
	if !s.Fail(errors.New("dial: pw refused")) {
		t.Fatal("first failure should log")
	}
	for range 5 {
		if s.Fail(errors.New("again")) {
			t.Fatal("repeat failure logged")
		}
	}
	if !s.Down() {
		t.Fatal("not down")
	}
	if !s.OK() || s.OK() {
		t.Fatal("recovery should log exactly once")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d log lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[0], "dial: xxxxx refused") {
		t.Fatalf("down line: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"level":"info"`) || !strings.Contains(lines[1], `"failed_attempts":6`) {
		t.Fatalf("recovered line: %s", lines[1])
	}
	if strings.Contains(buf.String(), "pw refused") {
		t.Fatalf("password logged: %s", buf.String())
	}
}

// Every client New builds speaks RESP2 with maintenance notifications off: over RESP3
// go-redis looks for push notifications before every reply, and its "auto" maintenance mode
// sends a handshake on every new connection and, when Redis refuses it, rewrites the client's
// options while other goroutines copy them (a step source's read client does), a data race.
func TestNewClientProtocol(t *testing.T) {
	for _, o := range []Options{{URL: "redis://127.0.0.1:1/0"}, {Cluster: []string{"127.0.0.1:1"}}} {
		c, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		var mode maintnotifications.Mode
		var protocol int
		switch c := c.(type) {
		case *redis.Client:
			mode, protocol = c.Options().MaintNotificationsConfig.Mode, c.Options().Protocol
		case *redis.ClusterClient:
			mode, protocol = c.Options().MaintNotificationsConfig.Mode, c.Options().Protocol
		}
		c.Close()
		if mode != maintnotifications.ModeDisabled || protocol != 2 {
			t.Errorf("%+v: maintenance notifications %q, protocol %d; want disabled, 2", o, mode, protocol)
		}
	}
}
