package redisconn

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// PlaintextProblem is what TLSProblem says of a TLS client pointed at a plaintext port.
const PlaintextProblem = "the server did not answer the TLS handshake: is it a plaintext port?"

// PlaintextPortError is a ping over TLS that failed (a handshake timeout, typically: Redis reads
// a ClientHello as the start of an inline command and waits for its end) against an address
// that answers a plain PING: a rediss:// url or a tls {} block pointed at a plaintext port.
type PlaintextPortError struct {
	Addr string
	Err  error // the ping's own error
}

func (e *PlaintextPortError) Error() string {
	return fmt.Sprintf("%s answers without TLS: %v", e.Addr, e.Err)
}

func (e *PlaintextPortError) Unwrap() error { return e.Err }

// plaintextProbeTimeout bounds the probe of one address.
const plaintextProbeTimeout = time.Second

// probePlaintext is run when a TLS client's ping failed for no reason TLSProblem knows: it
// sends a plain PING to each of the client's addresses and returns a PlaintextPortError for
// the first that answers in RESP. Failing that, it shakes hands with each address again and
// returns the TLS alert a server sends after the handshake (TLS 1.3 checks the client's
// certificate only then, so the ping's own write can meet a reset before the alert is read).
// Nil when the client has no TLS or neither probe finds anything.
func probePlaintext(c redis.UniversalClient, pingErr error) error {
	var (
		addrs []string
		cfg   *tls.Config
	)
	switch c := c.(type) {
	case *redis.Client:
		if o := c.Options(); o.TLSConfig != nil && o.Network != "unix" {
			addrs, cfg = []string{o.Addr}, o.TLSConfig
		}
	case *redis.ClusterClient:
		if o := c.Options(); o.TLSConfig != nil {
			addrs, cfg = o.Addrs, o.TLSConfig
		}
	}
	for _, addr := range addrs {
		if answersPlaintext(addr) {
			return &PlaintextPortError{Addr: addr, Err: pingErr}
		}
	}
	for _, addr := range addrs {
		if err := tlsAlert(addr, cfg); err != nil {
			return err
		}
	}
	return nil
}

// tlsAlert shakes hands with addr and, sending nothing, waits briefly for what the server says:
// a TLS problem (a failed handshake or an alert such as "certificate required") comes back as
// the error; silence, a refused dial or anything else is nil.
func tlsAlert(addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), plaintextProbeTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	conn := tls.Client(raw, cfg)
	defer conn.Close()
	if err := conn.HandshakeContext(ctx); err != nil {
		if IsTLSError(err) {
			return err
		}
		return nil
	}
	_ = conn.SetReadDeadline(time.Now().Add(plaintextProbeTimeout / 2))
	if _, err := conn.Read(make([]byte, 1)); err != nil && IsTLSError(err) {
		return err
	}
	return nil
}

// answersPlaintext reports whether addr answers "PING\r\n" with a RESP reply (+PONG, or an
// error such as -NOAUTH), as a Redis server without TLS on that port does.
func answersPlaintext(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), plaintextProbeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(plaintextProbeTimeout))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || len(line) < 3 {
		return false
	}
	return (line[0] == '+' || line[0] == '-') && strings.HasSuffix(line, "\r\n")
}

// TLSProblem reports whether err is a failed TLS handshake or certificate check and, when it
// is, says in a few words what went wrong and which tls {} setting to look at. Such a failure
// is a configuration problem, like a wrong password (SPEC §10): it does not pass by waiting, and
// flowrun never falls back to plaintext.
func TLSProblem(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		header    tls.RecordHeaderError
		op        *net.OpError
	)
	var plain *PlaintextPortError
	switch {
	case errors.As(err, &plain):
		return PlaintextProblem, true
	case errors.As(err, &unknownCA):
		return "the server's certificate is signed by an authority that is not trusted (check tls.ca_file)", true
	case errors.As(err, &hostname):
		return "the server's certificate does not match the name " + quoteName(hostname.Host) +
			" (check tls.server_name, or the host in the url)", true
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (expired, not yet valid, or not for a server)", true
	case errors.As(err, &verify):
		return "the server's certificate could not be verified", true
	case errors.As(err, &header):
		// A plaintext server answered the ClientHello as a command: "first record does not
		// look like a TLS handshake".
		return PlaintextProblem, true
	case errors.As(err, &op) && op.Op == "remote error":
		// The server's TLS alert, e.g. "tls: certificate required" (TLS 1.3, no client
		// certificate sent) or "tls: bad certificate" (one it does not accept).
		msg := op.Err.Error()
		switch {
		case strings.Contains(msg, "certificate required"):
			return "the server requires a client certificate (set tls.cert_file and tls.key_file)", true
		case strings.Contains(msg, "certificate"):
			return "the server refused the client certificate (check tls.cert_file and tls.key_file)", true
		case strings.HasPrefix(msg, "tls:"):
			return "the server ended the TLS handshake", true
		}
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.HasPrefix(e.Error(), "tls: ") {
			return "the TLS handshake failed", true
		}
	}
	return "", false
}

func quoteName(s string) string {
	if s == "" {
		return `""`
	}
	return `"` + s + `"`
}

// IsTLSError reports whether err is a failed TLS handshake or certificate check (TLSProblem).
func IsTLSError(err error) bool {
	_, ok := TLSProblem(err)
	return ok
}

// IsConfigError reports an error that waiting will not cure and that means the redis block is
// wrong: an authentication failure (IsAuthError) or a TLS failure (IsTLSError). At start it ends
// flowrun with exit 2 naming it (SPEC §10).
func IsConfigError(err error) bool {
	return IsAuthError(err) || IsTLSError(err)
}
