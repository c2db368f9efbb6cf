// Package redisconn builds the go-redis clients every Redis transport shares (streams, lists,
// Pub/Sub, sinks) from one redis block, and holds the small helpers they all need: secret
// redaction, auth-error detection, cluster slot comparison, a reconnect backoff and a logger of
// up/down state changes.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// MinPoolSize is the smallest connection pool New configures. Blocking reads (lists, streams
// on a Cluster) hold a connection while settlements, keep-alives and sinks need others at the
// same time.
const MinPoolSize = 16

// Options is one redis block (SPEC §2): exactly one of URL, Cluster or SentinelMaster.
type Options struct {
	URL              string   // redis://, rediss:// (TLS) or unix://
	Cluster          []string // seed addresses of a Redis Cluster
	SentinelMaster   string   // Sentinel: the master's name
	SentinelAddrs    []string // Sentinel: the sentinels' addresses
	SentinelUsername string
	SentinelPassword string
	Username         string // overrides the URL's user when set
	Password         string // overrides the URL's password when set; never logged
	TLS              *TLSOptions
}

// TLSOptions is a tls {} block. Its presence turns TLS on, also for a redis:// URL.
type TLSOptions struct {
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string
	InsecureSkipVerify bool
}

// Secrets lists every password in o, including one embedded in the URL, for Redact.
func (o Options) Secrets() []string {
	var s []string
	for _, p := range []string{o.Password, o.SentinelPassword, urlPassword(o.URL)} {
		if p != "" {
			s = append(s, p)
		}
	}
	return s
}

func urlPassword(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

// New builds a client for o without connecting (go-redis dials lazily); use Ping to check the
// server. The caller owns the client and closes it. Errors never contain a password.
//
// The client is watched from its first connection (Watch), and a cluster client reloads its slot
// map whenever a command fails with MOVED, CLUSTERDOWN, READONLY, MASTERDOWN or a connection
// error, not only on go-redis's timer (SPEC §10: work resumes within 10 s of a failover).
func New(o Options) (redis.UniversalClient, error) {
	c, err := build(o)
	if err != nil {
		return nil, RedactError(err, o.Secrets()...)
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.AddHook(slotRefresh{cc})
	}
	Watch(c)
	return c, nil
}

func build(o Options) (redis.UniversalClient, error) {
	n := 0
	for _, set := range []bool{o.URL != "", len(o.Cluster) > 0, o.SentinelMaster != "" || len(o.SentinelAddrs) > 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("redisconn: exactly one of url, cluster or sentinel must be set")
	}
	var tlsCfg *tls.Config
	if o.TLS != nil {
		var err error
		if tlsCfg, err = o.TLS.config(); err != nil {
			return nil, err
		}
	}
	switch {
	case len(o.Cluster) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:     o.Cluster,
			Username:  o.Username,
			Password:  o.Password,
			TLSConfig: tlsCfg,
			PoolSize:  poolSize(0),
			// as for every client: see the standalone one below
			Protocol:                 2,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}), nil
	case o.SentinelMaster != "" || len(o.SentinelAddrs) > 0:
		if o.SentinelMaster == "" || len(o.SentinelAddrs) == 0 {
			return nil, errors.New("redisconn: sentinel needs both master and addrs")
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:       o.SentinelMaster,
			SentinelAddrs:    o.SentinelAddrs,
			SentinelUsername: o.SentinelUsername,
			SentinelPassword: o.SentinelPassword,
			Username:         o.Username,
			Password:         o.Password,
			TLSConfig:        tlsCfg,
			PoolSize:         poolSize(0),
			Protocol:         2, // see the standalone client below
		}), nil
	}
	ro, err := redis.ParseURL(o.URL)
	if err != nil {
		// url.Parse errors quote the whole URL, password included; New redacts it.
		return nil, fmt.Errorf("redisconn: parse url: %w", err)
	}
	if o.Username != "" {
		ro.Username = o.Username
	}
	if o.Password != "" {
		ro.Password = o.Password
	}
	if tlsCfg != nil {
		if ro.Network == "unix" {
			return nil, errors.New("redisconn: tls cannot be used with a unix:// url")
		}
		if tlsCfg.ServerName == "" && ro.TLSConfig != nil {
			tlsCfg.ServerName = ro.TLSConfig.ServerName // rediss:// sets the URL's host
		}
		ro.TLSConfig = tlsCfg
	}
	ro.PoolSize = poolSize(ro.PoolSize)
	// Maintenance notifications (a Redis Enterprise feature, over RESP3 push) are off, as
	// go-redis has them for a failover client: in its "auto" mode every new connection sends a
	// handshake that open-source Redis refuses, and the fallback rewrites the client's options
	// while other goroutines copy them (a data race under -race).
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// RESP2: flowrun reads no push notifications (Pub/Sub has connections of its own), and over
	// RESP3 go-redis looks for them before every reply it reads, about 6% of a workflow's CPU.
	ro.Protocol = 2
	return redis.NewClient(ro), nil
}

// poolSize keeps go-redis's default (10 per CPU) unless that is smaller than MinPoolSize.
func poolSize(n int) int {
	if n == 0 {
		n = 10 * runtime.GOMAXPROCS(0)
	}
	return max(n, MinPoolSize)
}

func (t *TLSOptions) config() (*tls.Config, error) {
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // the user asked for it in tls {}
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redisconn: read ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redisconn: ca_file %s: no PEM certificates", t.CAFile)
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("redisconn: tls needs both cert_file and key_file, or neither")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redisconn: load client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Ping checks that the server answers, returning an error safe to log (passwords redacted).
// IsAuthError still recognises a wrong password through the wrapping.
//
// A TLS client whose ping failed for no reason of its own (no TLS alert, no certificate error:
// typically the handshake timed out) probes its addresses without TLS: one that answers a plain
// PING makes the error a PlaintextPortError, which TLSProblem names (SPEC §10: a handshake
// failure at start exits 2 naming it), rather than a server to wait for.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		if !IsConfigError(err) {
			if perr := probePlaintext(c, err); perr != nil {
				err = perr
			}
		}
		return RedactError(fmt.Errorf("redisconn: ping: %w", err), SecretsOf(c)...)
	}
	return nil
}

// SecretsOf returns the passwords a client was built with, for redacting errors from code that
// was handed a client rather than its Options.
func SecretsOf(c redis.UniversalClient) []string {
	var s []string
	add := func(p ...string) {
		for _, x := range p {
			if x != "" {
				s = append(s, x)
			}
		}
	}
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		add(o.Password)
	case *redis.ClusterClient:
		o := c.Options()
		add(o.Password)
	}
	return s
}
