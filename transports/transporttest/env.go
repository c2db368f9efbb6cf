package transporttest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// env is one entry's world: its harness, the source under test and what the suite plays of
// the engine.
type env struct {
	t          *testing.T
	f          Features
	newHarness func(t *testing.T, o SourceOptions) Harness

	o    SourceOptions
	h    Harness
	src  engine.Source
	caps engine.Capabilities
}

// defaultBatch is the read size of a source under test: small, so that the feed fills up.
const defaultBatch = 10

// start builds the harness and the source under test, read batch at a time (0: defaultBatch).
func (e *env) start(batch int) {
	if batch == 0 {
		batch = defaultBatch
	}
	key := uniqueKey(e.t)
	e.o = SourceOptions{Key: key, DeadLetter: key + ".dlq", Batch: batch}
	e.h = e.newHarness(e.t, e.o)
	e.src = e.h.Source(e.t)
	e.caps = e.src.Capabilities()
}

// receive starts Receive on the source under test with a feed of one batch, as the engine does.
func (e *env) receive() *Receiver {
	r := Receive(e.t, e.src, e.o.Batch)
	if e.f.Live {
		e.waitReady(e.src)
	}
	return r
}

// waitReady waits for a source that says when it is ready (it has subscribed, or read once).
func (e *env) waitReady(src engine.Source) {
	rs, ok := src.(interface{ Ready() bool })
	if !ok {
		return
	}
	deadline := time.Now().Add(Timeout)
	for !rs.Ready() {
		if time.Now().After(deadline) {
			e.t.Fatalf("source not ready within %s", Timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// deliver sends msgs to the source under test and returns its receiver and the deliveries, one
// per message, in order, numbered as the engine numbers them.
func (e *env) deliver(msgs ...*engine.Message) (*Receiver, []*engine.Delivery) {
	e.t.Helper()
	r := e.send(msgs...)
	ds := r.Take(e.t, len(msgs))
	for _, d := range ds {
		e.number(d)
	}
	return r, ds
}

// send makes msgs the input of the source under test, receiving. A Live source is started
// first, since it would miss what was sent before it subscribed.
func (e *env) send(msgs ...*engine.Message) *Receiver {
	e.t.Helper()
	if e.f.Live {
		r := e.receive()
		e.h.Inject(e.t, msgs...)
		return r
	}
	e.h.Inject(e.t, msgs...)
	return e.receive()
}

// deliverStopped is deliver, with reading stopped afterwards: what the suite settles then is
// not read back while it looks at what was written.
func (e *env) deliverStopped(msgs ...*engine.Message) []*engine.Delivery {
	e.t.Helper()
	r, ds := e.deliver(msgs...)
	if err := r.Stop(e.t); err != nil {
		e.t.Fatalf("Receive = %v", err)
	}
	return ds
}

// number sets a delivery's attempt as the engine does (SPEC §5): from x-retry-count, unless the
// source counts deliveries itself.
func (e *env) number(d *engine.Delivery) {
	e.t.Helper()
	if d.Headers == nil {
		e.t.Fatalf("delivery %q has nil headers", d.Payload)
	}
	e.caps.Number(d)
}

// policy is the engine's settlement policy for this source.
func (e *env) policy(maxAttempts int, deadLetter string) engine.Policy {
	return engine.Policy{MaxAttempts: maxAttempts, DeadLetter: deadLetter, Caps: e.caps}
}

// settle runs Settle and checks that it changed none of the caller's messages.
func (e *env) settle(batch []engine.Settlement) error {
	e.t.Helper()
	type before struct {
		key, copyKey string
		headers      map[string]string
		copyHeaders  map[string]string
	}
	was := make([]before, len(batch))
	for i, st := range batch {
		if st.Delivery != nil {
			was[i].key, was[i].headers = st.Delivery.Key, maps.Clone(st.Delivery.Headers)
		}
		if st.Copy != nil {
			was[i].copyKey, was[i].copyHeaders = st.Copy.Key, maps.Clone(st.Copy.Headers)
		}
	}
	err := e.src.Settle(context.Background(), batch)
	for i, st := range batch {
		if st.Delivery != nil && (st.Delivery.Key != was[i].key || !maps.Equal(st.Delivery.Headers, was[i].headers)) {
			e.t.Errorf("Settle changed delivery %d: key %q headers %v", i, st.Delivery.Key, st.Delivery.Headers)
		}
		if st.Copy != nil && (st.Copy.Key != was[i].copyKey || !maps.Equal(st.Copy.Headers, was[i].copyHeaders)) {
			e.t.Errorf("Settle changed the copy of delivery %d: key %q headers %v", i, st.Copy.Key, st.Copy.Headers)
		}
	}
	return err
}

// mustSettle settles batch, which must go through.
func (e *env) mustSettle(batch ...engine.Settlement) {
	e.t.Helper()
	if err := e.settle(batch); err != nil {
		e.t.Fatalf("Settle = %v", err)
	}
}

// faults returns the faults of a Settle error, which must be an *engine.SettleError.
func (e *env) faults(err error) []engine.Fault {
	e.t.Helper()
	if err == nil {
		return nil
	}
	var se *engine.SettleError
	if !errors.As(err, &se) {
		e.t.Fatalf("Settle = %v (%T), want an *engine.SettleError naming the deliveries that failed", err, err)
	}
	return se.Faults
}

// count is how many messages key holds.
func (e *env) count(key string) int { return len(e.h.Read(e.t, key)) }

// since returns what key holds beyond its first n messages.
func (e *env) since(key string, n int) []*engine.Message {
	e.t.Helper()
	all := e.h.Read(e.t, key)
	if len(all) < n {
		e.t.Fatalf("%s holds %d messages, fewer than the %d it held before", key, len(all), n)
	}
	return all[n:]
}

// unsettled asserts how many deliveries are left unacknowledged, where the source acknowledges.
func (e *env) unsettled(want int) {
	e.t.Helper()
	if !e.f.Ack {
		return
	}
	if n := e.h.Unsettled(e.t); n != want {
		e.t.Fatalf("%d deliveries unacknowledged, want %d", n, want)
	}
}

// quiet is how long a negative check waits: longer than it takes an entry left pending to be
// taken back.
func (e *env) quiet() time.Duration {
	return max(150*time.Millisecond, 2*e.caps.MinIdle+100*time.Millisecond)
}

// restart closes the source under test and returns a new one over the same keys, receiving.
func (e *env) restart() *Receiver {
	e.t.Helper()
	if err := e.src.Close(); err != nil {
		e.t.Fatalf("Close = %v", err)
	}
	e.src = e.h.Source(e.t)
	return e.receive()
}

// expectBack asserts that a restarted source delivers exactly payloads (in any order), then
// nothing more.
func (e *env) expectBack(r *Receiver, payloads []string) {
	e.t.Helper()
	var got []string
	for range payloads {
		got = append(got, string(r.Next(e.t).Payload))
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(payloads))
	if !slices.Equal(got, want) {
		e.t.Fatalf("a new source delivered %q, want what was left unsettled: %q", got, want)
	}
	r.None(e.t, e.quiet())
}

// msg is a message to inject: payload and headers as name, value pairs.
func msg(payload string, headers ...string) *engine.Message {
	m := &engine.Message{Headers: map[string]string{}, Payload: []byte(payload)}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers[headers[i]] = headers[i+1]
	}
	return m
}

// with returns h plus the name, value pairs.
func with(h map[string]string, kv ...string) map[string]string {
	out := maps.Clone(h)
	if out == nil {
		out = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// same asserts that m has exactly headers and payload.
func (e *env) same(what string, m *engine.Message, headers map[string]string, payload []byte) {
	e.t.Helper()
	if !maps.Equal(m.Headers, headers) || string(m.Payload) != string(payload) {
		e.t.Fatalf("%s: headers %v payload %q; want headers %v payload %q", what, m.Headers, m.Payload, headers, payload)
	}
}

// deadLetterHeaders is what SPEC §5 adds to a dead letter of d.
func (e *env) deadLetterHeaders(d *engine.Delivery, reason string, now time.Time) map[string]string {
	h := with(d.Headers,
		engine.HeaderDeadLetterReason, reason,
		engine.HeaderOriginalKey, d.Key,
		engine.HeaderAttempts, strconv.Itoa(d.Attempt),
		engine.HeaderFailedAt, now.UTC().Format(time.RFC3339))
	if e.f.IDs {
		h[engine.HeaderOriginalID] = d.ID
	}
	return h
}

// payloads lists the payloads of ds as strings.
func payloads(ds []*engine.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Payload)
	}
	return out
}

// decide is the policy's decision, which must be the action want.
func (e *env) decide(p engine.Policy, d *engine.Delivery, o engine.Outcome, cause error, now time.Time, want engine.Action) engine.Decision {
	e.t.Helper()
	dec := p.Decide(d, o, cause, now)
	if dec.Settlement.Action != want {
		e.t.Fatalf("the policy settles %s on this source with %s, want %s (do Features and Capabilities agree?)", o, dec.Settlement.Action, want)
	}
	return dec
}
