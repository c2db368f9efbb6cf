package plugins

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

// Target is where an emitted message goes: ToStream, ToList or ToChannel (Redis, a RedisTarget)
// or ToRecord (a JSON-lines record, a RecordTarget). Only this package makes Targets. Targets
// compare with ==.
type Target interface {
	// String names the target: stream "payouts.done" via "cache", record "k" in "out.jsonl".
	String() string
	// check says what makes the target unusable: the zero value, an empty key.
	check() error
	// engine is the engine's form of the target and the destination key; dir resolves a
	// relative record file, redis is the redis block of a Redis target that names none.
	engine(dir, redis string) (engine.Target, string)
}

// Emit kinds, as in an HCL emit "KIND" block (SPEC §7).
const (
	kindStream = "stream"
	kindList   = "list"
	kindPubSub = "pubsub"
	kindRecord = "record"
)

// RedisTarget is a Redis stream, list or Pub/Sub channel to emit to.
type RedisTarget struct {
	kind, key, redis string
}

// ToStream emits to the Redis stream key (XADD).
func ToStream(key string) RedisTarget { return RedisTarget{kind: kindStream, key: key} }

// ToList emits to the Redis list key, as a rule's emit "list" does.
func ToList(key string) RedisTarget { return RedisTarget{kind: kindList, key: key} }

// ToChannel publishes to the Redis Pub/Sub channel.
func ToChannel(channel string) RedisTarget { return RedisTarget{kind: kindPubSub, key: channel} }

// Via sends through the redis block of that name rather than the default: the pipeline's
// source's own redis block, else the only one. An unknown name fails the emit, and so the
// delivery is retried.
func (t RedisTarget) Via(redis string) RedisTarget {
	t.redis = redis
	return t
}

func (t RedisTarget) String() string {
	s := fmt.Sprintf("%s %q", t.kind, t.key)
	if t.kind == "" {
		s = "invalid target"
	}
	if t.redis != "" {
		s += fmt.Sprintf(" via %q", t.redis)
	}
	return s
}

func (t RedisTarget) check() error {
	switch {
	case t.kind == "":
		return errors.New("the zero RedisTarget: use ToStream, ToList or ToChannel")
	case t.key == "":
		return fmt.Errorf("%s: empty key", t)
	}
	return nil
}

func (t RedisTarget) engine(_, redis string) (engine.Target, string) {
	if t.redis != "" {
		redis = t.redis
	}
	return engine.Target{Kind: t.kind, Redis: redis}, t.key
}

// RecordTarget is a JSON-lines record {"key", "headers", "payload"}, written to stdout or to a
// stream file, as a rule's emit "record" writes it.
type RecordTarget struct {
	key, path string
}

// ToRecord emits a record with this key to stdout.
func ToRecord(key string) RecordTarget { return RecordTarget{key: key} }

// InFile appends the record to the stream file at path instead of stdout. A relative path is
// relative to the directory of the HCL file that declares the handler, like every path in
// flowrun's configuration.
func (t RecordTarget) InFile(path string) RecordTarget {
	t.path = path
	return t
}

func (t RecordTarget) String() string {
	s := fmt.Sprintf("%s %q", kindRecord, t.key)
	if t.path != "" {
		s += fmt.Sprintf(" in %q", t.path)
	}
	return s
}

func (t RecordTarget) check() error {
	if t.key == "" {
		return fmt.Errorf("%s: empty key", t)
	}
	return nil
}

func (t RecordTarget) engine(dir, _ string) (engine.Target, string) {
	path := t.path
	if path != "" {
		path = resolvePath(dir, path)
	}
	return engine.Target{Kind: kindRecord, Path: path}, t.key
}

// Emitter takes the messages a handler emits. They are written after Handle returns and before
// the delivery is settled (SPEC §7), and only when Handle returns no error; if writing them
// fails, the delivery is retried, so an emit may be written twice but is never lost. An Emitter
// is safe for concurrent use, and valid until Handle returns.
type Emitter struct {
	mu     sync.Mutex
	emits  []Emitted
	err    error
	closed bool
	log    zerolog.Logger
}

// Emitted is one message a handler emitted, as Call reports it.
type Emitted struct {
	To      Target
	Payload []byte
	Headers map[string]string // never nil
}

// Emit writes a message with payload and headers to the target. Emit copies both, so the
// caller may reuse them. A nil target or an empty key fails the delivery (a retry, with the
// error logged).
func (e *Emitter) Emit(to Target, payload []byte, headers map[string]string) {
	h := make(map[string]string, len(headers))
	maps.Copy(h, headers)
	em := Emitted{To: to, Payload: bytes.Clone(payload), Headers: h}
	var err error
	if to == nil {
		err = errors.New("emit: no target: use ToStream, ToList, ToChannel or ToRecord")
	} else if terr := to.check(); terr != nil {
		err = fmt.Errorf("emit: %w", terr)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		e.log.Error().Stringer("target", stringer{to}).Msg("emit after Handle returned: dropped; Emit is valid only until Handle returns")
		return
	}
	if err != nil {
		if e.err == nil {
			e.err = err
		}
		return
	}
	e.emits = append(e.emits, em)
}

// close ends the emitter's use and returns what was emitted and the first emit error.
func (e *Emitter) close() ([]Emitted, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	return e.emits, e.err
}

// stringer prints a possibly nil Target.
type stringer struct{ t Target }

func (s stringer) String() string {
	if s.t == nil {
		return "nil"
	}
	return s.t.String()
}
