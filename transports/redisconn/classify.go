package redisconn

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
)

// Classify says why a Redis command failed, as a short metric label, and whether the failure
// passes by itself (SPEC §10 "Settlement failures"). Transient: a lost or refused connection,
// LOADING, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, READONLY, MOVED/ASK, BUSY, a pool timeout. Permanent:
// NOPERM, WRONGTYPE, a script error, an unsupported action, any other server error reply (a
// server that rejected a command will reject it again).
func Classify(err error) (reason string, permanent bool) {
	if err == nil {
		return "", false
	}
	if errors.Is(err, engine.ErrUnsupported) {
		return "unsupported", true
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		code, _, _ := strings.Cut(msg, " ")
		switch code {
		case "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK",
			"BUSY", "NOREPLICAS", "OOM":
			// OOM passes once memory is freed; the others pass once a failover or load ends.
			return strings.ToLower(code), false
		case "NOPERM", "WRONGTYPE", "NOSCRIPT", "EXECABORT":
			return strings.ToLower(code), true
		case "ERR":
			// Inside a script, Redis 7.0 refuses a command the ACL does not grant with an ERR.
			if strings.Contains(msg, "can't run this command") || strings.Contains(msg, "no permissions") {
				return "noperm", true
			}
			if strings.Contains(msg, "script") || strings.Contains(msg, "Script") {
				return "script", true
			}
		}
		return "error", true
	}
	if errors.Is(err, engine.ErrPermanent) {
		return "permanent", true
	}
	if IsConnError(err) {
		return "connection", false
	}
	return "error", false
}

// IsConnError reports whether err means the connection, not the command, failed.
func IsConnError(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne):
		return true
	}
	return false
}

// Fault describes the failure of one settlement's command for the engine: the command and key
// are named, the server's own error text is kept, and the reason comes from Classify.
func Fault(index int, command, key string, err error, secrets ...string) engine.Fault {
	reason, perm := Classify(err)
	return engine.Fault{Index: index, Command: command, Key: key, Reason: reason, Permanent: perm,
		Err: RedactError(err, secrets...)}
}

// ServerError is an error reply Redis gave inside a script (a redis.pcall error table): it
// classifies like the same reply to a command.
type ServerError string

func (e ServerError) Error() string { return string(e) }

// RedisError marks ServerError as a redis.Error.
func (ServerError) RedisError() {}

var _ redis.Error = ServerError("")

// IsNoScript reports whether err is Redis's answer to an EVALSHA of a script it does not hold
// (after a restart or a SCRIPT FLUSH): send the script with EVAL instead.
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
