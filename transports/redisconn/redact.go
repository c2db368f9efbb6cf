package redisconn

import (
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redacted replaces a secret wherever Redact finds one.
const Redacted = "xxxxx"

// userinfo matches the password part of URLs such as redis://user:pass@host, so a URL with an
// unknown password is still safe to print.
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:@/\s]*:)([^@\s]+)@`)

// Redact returns s with every non-empty secret, and any password inside a URL's userinfo,
// replaced by Redacted. Secrets are also replaced in their URL-escaped form.
func Redact(s string, secrets ...string) string {
	for _, p := range secrets {
		if p == "" {
			continue
		}
		s = strings.ReplaceAll(s, p, Redacted)
		if q := url.QueryEscape(p); q != p {
			s = strings.ReplaceAll(s, q, Redacted)
		}
		if q := url.PathEscape(p); q != p {
			s = strings.ReplaceAll(s, q, Redacted)
		}
	}
	return userinfo.ReplaceAllString(s, "${1}"+Redacted+"@")
}

// RedactError returns err with a redacted message. errors.Is/As still see the original through
// Unwrap (so IsAuthError keeps working); only Error() is rewritten. nil stays nil.
func RedactError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := Redact(err.Error(), secrets...)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// IsAuthError reports an authentication failure (WRONGPASS, NOAUTH, a password sent to a server
// that has none), which is a configuration problem rather than a transient fault.
func IsAuthError(err error) bool {
	if err == nil {
		return false
	}
	if redis.IsAuthError(err) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		s := e.Error()
		if strings.HasPrefix(s, "WRONGPASS") || strings.HasPrefix(s, "NOAUTH") ||
			strings.Contains(s, "without any password configured") ||
			strings.Contains(s, "invalid username-password pair") {
			return true
		}
	}
	return false
}
