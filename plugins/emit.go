package plugins

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/registry"
)

// Target is where an emitted message goes: ToStream, ToList or ToChannel (Redis, a RedisTarget),
// ToRecord (a JSON-lines record, a RecordTarget), or To (any registered emit kind, a KindTarget).
// Only this package makes Targets. Targets compare with ==.
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

func (t RedisTarget) String() string { return describe(t.kind, t.key, t.redis, "") }

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

func (t RecordTarget) String() string { return describe(kindRecord, t.key, "", t.path) }

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

// KindTarget is an emit kind named as a rule's emit "KIND" block names it: a built-in one or one a
// transport package registers (transports.RegisterEmit), found in the registry ("emit.KIND") when
// the handler emits.
type KindTarget struct {
	kind, key, redis, path string
}

// To emits to the emit kind registered as kind, under key: To("stream", k) writes what
// ToStream(k) does, and To("webhook", k) writes to an emit kind a custom binary registered. An
// unregistered kind fails the emit, and so the delivery is retried.
func To(kind, key string) KindTarget { return KindTarget{kind: kind, key: key} }

// Via sends through the redis block of that name rather than the default (the pipeline's
// source's own redis block, else the only one), for a kind that writes through a redis block;
// on any other kind the emit fails.
func (t KindTarget) Via(redis string) KindTarget {
	t.redis = redis
	return t
}

// InFile gives the emit the path a kind that takes "path" writes to (emit "record"), relative to
// the directory of the HCL file that declares the handler; on any other kind the emit fails.
func (t KindTarget) InFile(path string) KindTarget {
	t.path = path
	return t
}

func (t KindTarget) String() string { return describe(t.kind, t.key, t.redis, t.path) }

// describe names a target: stream "payouts.done" via "cache", record "k" in "out.jsonl".
func describe(kind, key, redis, path string) string {
	s := fmt.Sprintf("%s %q", kind, key)
	if kind == "" {
		s = "invalid target"
	}
	if redis != "" {
		s += fmt.Sprintf(" via %q", redis)
	}
	if path != "" {
		s += fmt.Sprintf(" in %q", path)
	}
	return s
}

// emitKind is what a KindTarget asks of an emit kind's module (transports.EmitKind), so that
// plugins needs no transport package.
type emitKind interface {
	WritesRedis() bool
	TakesPath() bool
}

func lookupEmit(kind string) (emitKind, bool) {
	m, ok := registry.Lookup(registry.NewID(registry.Emit, kind))
	ek, isKind := m.(emitKind)
	return ek, ok && isKind
}

func (t KindTarget) check() error {
	if t.kind == "" {
		return errors.New("the zero KindTarget: use To")
	}
	ek, ok := lookupEmit(t.kind)
	switch {
	case !ok:
		return fmt.Errorf("%s: no emit kind %q is registered", t, t.kind)
	case t.key == "":
		return fmt.Errorf("%s: empty key", t)
	case t.redis != "" && !ek.WritesRedis():
		return fmt.Errorf("%s: Via: a %s emit writes through no redis block", t, t.kind)
	case t.path != "" && !ek.TakesPath():
		return fmt.Errorf("%s: InFile: a %s emit takes no path", t, t.kind)
	}
	return nil
}

func (t KindTarget) engine(dir, redis string) (engine.Target, string) {
	target := engine.Target{Kind: t.kind}
	if ek, ok := lookupEmit(t.kind); ok && ek.WritesRedis() {
		target.Redis = redis
		if t.redis != "" {
			target.Redis = t.redis
		}
	}
	if t.path != "" {
		target.Path = resolvePath(dir, t.path)
	}
	return target, t.key
}

// Emitter takes the messages a handler emits. They are written after Handle returns and before
// the delivery is settled (SPEC §7), and only when Handle returns no error; if writing them
// fails, the delivery is retried, so an emit may be written twice but is never lost. An Emitter
// is safe for concurrent use, and valid until Handle returns. In a workflow step, Output sets
// what the step records.
type Emitter struct {
	mu     sync.Mutex
	emits  []Emitted
	err    error
	closed bool
	log    zerolog.Logger
	inRun  bool            // the delivery is a workflow step's: Output records
	output json.RawMessage // what Output set; nil: nothing
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
