package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
)

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
	switch {
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
		return "the server did not answer in TLS (is this its TLS port?)", true
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
