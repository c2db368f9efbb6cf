package transporttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// The suite, one entry a row: Receive and the feed, SPEC §4's settlement table, §5, and §10.
var entries = []entry{
	{name: "capabilities", run: capabilities},

	{name: "receive/messages", run: receiveMessages},
	{name: "receive/never more than room", run: receiveRoom},
	{name: "receive/stop", run: receiveStop},
	{name: "receive/end of input", run: receiveEnd},

	{name: "settle/ack", run: func(e *env) { settleAck(e, engine.Ack()) }},
	{name: "settle/drop", run: func(e *env) { settleAck(e, engine.Drop()) }},
	{name: "settle/retry", run: func(e *env) { settleRetry(e, false) }},
	{name: "settle/retry under a cap", run: func(e *env) { settleRetry(e, true) }},
	{name: "settle/retry_after", run: settleRetryAfter},
	{name: "settle/dead_letter", run: settleDeadLetter},
	{name: "settle/unsupported actions", needs: needsUnsupported, run: settleUnsupported},

	{name: "attempts/copies count on", needs: needsReadBack, run: attemptsCountOn},
	{name: "attempts/cap after the handler", run: capAfter},
	{name: "attempts/cap before the handler", run: capBefore},
	{name: "attempts/cap without a dead letter", run: capWithoutDeadLetter},

	{name: "delays/runtime copies", run: delaysRuntime},
	{name: "delays/durable", needs: needsDurable, run: delaysDurable},
	{name: "delays/in place", needs: needsInPlace, run: delaysInPlace},

	{name: "idempotent/settled again", run: idempotentAgain},
	{name: "idempotent/resent after a partial failure", run: idempotentPartial},

	{name: "isolation/permanent fault", run: isolation},
}

func needsUnsupported(f Features) string {
	if f.DurableDelay && f.Leave {
		return "every action is carried out"
	}
	return ""
}

func needsReadBack(f Features) string {
	if !f.ReadsCopies && !f.RetryInPlace {
		return "copies are not read back by the source (they go past the end of a replay, or to stdout)"
	}
	return ""
}

func needsDurable(f Features) string {
	if !f.DurableDelay {
		return "no durable delays"
	}
	return ""
}

func needsInPlace(f Features) string {
	if !f.RetryInPlace {
		return "retries are copies, not left in place"
	}
	return ""
}

// capabilities: what the source declares is what Features say (STYLE practice 4).
func capabilities(e *env) {
	e.start(0)
	c, f := e.caps, e.f
	if c.Ack != f.Ack || c.RetryInPlace != f.RetryInPlace || c.DurableDelay != f.DurableDelay || c.DeliveryCount != f.DeliveryCount {
		e.t.Fatalf("Capabilities %+v disagree with Features %+v", c, f)
	}
	if c.RetryInPlace && c.MinIdle <= 0 {
		e.t.Fatalf("Capabilities %+v: retry in place without a min_idle", c)
	}
	if c.Batch != 0 && c.Batch != e.o.Batch {
		e.t.Fatalf("Capabilities.Batch = %d, want the source's read size %d", c.Batch, e.o.Batch)
	}
}

// receiveMessages: SPEC §3's message (key, id, headers, payload), §5's attempt and §6's
// delivery headers, in the order sent.
func receiveMessages(e *env) {
	e.start(0)
	in := []*engine.Message{
		msg("p1", "h", "v", "a", "b"),
		msg(`{"n":2}`),
		msg("p3", engine.HeaderRetryCount, "2"),
	}
	_, ds := e.deliver(in...)
	ids := map[string]bool{}
	for i, d := range ds {
		want := maps.Clone(in[i].Headers)
		attempt := d.RetryCount() + 1
		if e.f.DeliveryCount {
			fresh := 0
			if e.f.CountsThisDelivery {
				fresh = 1
			}
			want = with(want, engine.HeaderDeliveryCount, strconv.Itoa(fresh), engine.HeaderIdleMS, "0")
			attempt = 1
			if d.DeliveryCount != fresh || d.IdleMS != 0 {
				e.t.Fatalf("delivery %d: delivery count %d idle %d, want %d and 0 for a fresh entry", i, d.DeliveryCount, d.IdleMS, fresh)
			}
		}
		e.same(fmt.Sprintf("delivery %d", i), &d.Message, want, in[i].Payload)
		if d.Key != e.h.Key() {
			e.t.Fatalf("delivery %d: key %q, want %q", i, d.Key, e.h.Key())
		}
		if d.Attempt != attempt {
			e.t.Fatalf("delivery %d: attempt %d, want %d", i, d.Attempt, attempt)
		}
		switch {
		case e.f.IDs && (d.ID == "" || ids[d.ID]):
			e.t.Fatalf("delivery %d: id %q, want one of its own", i, d.ID)
		case !e.f.IDs && d.ID != "":
			e.t.Fatalf("delivery %d: id %q on a transport without ids", i, d.ID)
		}
		ids[d.ID] = true
	}
}

// receiveRoom: Receive reads no more than the feed has room for (the Receiver checks every
// Push), so that a source never runs ahead of the handlers by more than a batch (SPEC §11).
func receiveRoom(e *env) {
	const batch, total, taken = 5, 30, 12
	e.start(batch)
	in := numbered("m", total)
	r := e.send(in...)
	// What is read and unacknowledged: the deliveries taken, the one the feed's goroutine
	// holds (as a handler slot would), and at most the feed's batch.
	bound := func(n int) int { return n + 1 + batch }
	for i := range taken {
		d := r.Next(e.t)
		if want := fmt.Sprintf("m%02d", i); string(d.Payload) != want {
			e.t.Fatalf("delivery %d = %q, want %q", i, d.Payload, want)
		}
		time.Sleep(5 * time.Millisecond)
		if e.f.Ack {
			if n := e.h.Unsettled(e.t); n > bound(i+1) {
				e.t.Fatalf("%d read with %d taken: more than taken + 1 + batch %d", n, i+1, batch)
			}
		}
	}
	time.Sleep(150 * time.Millisecond) // reading must have stalled: asserting that needs a wait
	if e.f.Ack {
		if n := e.h.Unsettled(e.t); n > bound(taken) {
			e.t.Fatalf("%d read with %d taken and none more: more than taken + 1 + batch %d", n, taken, batch)
		}
	}
	if err := r.Stop(e.t); err != nil {
		e.t.Fatalf("Receive = %v", err)
	}
}

// numbered is n messages with payloads prefix00, prefix01, ...
func numbered(prefix string, n int) []*engine.Message {
	in := make([]*engine.Message, n)
	for i := range in {
		in[i] = msg(fmt.Sprintf("%s%02d", prefix, i))
	}
	return in
}

// receiveStop: a stop ends Receive promptly with nothing pushed after it; what was handed over
// and never taken is given back (engine.Returner); nothing is lost: a new source delivers what
// was not handled.
func receiveStop(e *env) {
	const total, taken = 10, 3
	e.start(2)
	in := numbered("s", total)
	r := e.send(in...)
	got := r.Take(e.t, taken)
	stopped := time.Now()
	if err := r.Stop(e.t); err != nil {
		e.t.Fatalf("Receive = %v, want nil or the context's error at a stop", err)
	}
	if took := time.Since(stopped); took > 5*time.Second {
		e.t.Fatalf("Receive took %s to return after a stop", took)
	}
	_, returns := e.src.(engine.Returner)
	var back []string
	switch {
	case e.f.Redelivers:
		// Unsettled, the taken ones come back too.
		for _, m := range in {
			back = append(back, string(m.Payload))
		}
	case returns:
		for _, m := range in[taken:] {
			back = append(back, string(m.Payload))
		}
		for i, d := range got {
			if string(d.Payload) != string(in[i].Payload) {
				e.t.Fatalf("delivery %d = %q, want %q", i, d.Payload, in[i].Payload)
			}
		}
	default:
		return // read and gone (Pub/Sub), or read once (a pipe)
	}
	e.expectBack(e.restart(), back)
}

// receiveEnd: a finite source's Receive returns nil at the end of its input, once everything
// was delivered; any other reads on.
func receiveEnd(e *env) {
	e.start(0)
	in := []*engine.Message{msg("e1"), msg("e2"), msg("e3")}
	if !e.f.Finite {
		r, _ := e.deliver(in...)
		r.None(e.t, e.quiet())
		if !r.Running() {
			e.t.Fatal("Receive returned at the end of the input, but the source is not finite")
		}
		return
	}
	e.h.Inject(e.t, in...)
	e.h.End(e.t)
	ds := e.receive().Drain(e.t)
	if got := payloads(ds); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		e.t.Fatalf("delivered %q, want e1 e2 e3", got)
	}
}

// settleAck: SPEC §4's ack and drop rows: acknowledged where the source acknowledges, and
// nothing written anywhere; a new source does not deliver it again.
func settleAck(e *env, o engine.Outcome) {
	e.start(0)
	d := e.deliverStopped(msg("p", "h", "v"))[0]
	before := e.count(e.h.RetryKey())
	dec := e.decide(e.policy(0, ""), d, o, nil, time.Now(), engine.ActAck)
	e.mustSettle(dec.Settlement)
	e.unsettled(0)
	if n := e.count(e.h.RetryKey()); n != before {
		e.t.Fatalf("%s wrote %d messages to %s", o, n-before, e.h.RetryKey())
	}
	if k := e.h.Kind(e.t, e.o.DeadLetter); k != "" {
		e.t.Fatalf("%s wrote a dead letter (%s)", o, k)
	}
	if e.f.Redelivers {
		e.expectBack(e.restart(), nil)
	}
}

// retryAction is the row of SPEC §4 a bare retry takes on this source.
func (e *env) retryAction(capped bool) engine.Action {
	switch {
	case e.f.RetryInPlace:
		return engine.ActLeave
	case e.f.Ack || capped:
		return engine.ActRequeue
	}
	return engine.ActAck // no acknowledgement and no cap: not retried (SPEC §5)
}

// settleRetry: SPEC §4's retry row: a copy with x-retry-count one higher, written to the
// source's key before the original is acknowledged; left pending on claiming sources; on a
// source without acknowledgement, a copy only under a declared cap or dead letter.
func settleRetry(e *env, capped bool) {
	e.start(0)
	d := e.deliverStopped(msg("p", "h", "v"))[0]
	p := e.policy(0, "")
	if capped {
		p = e.policy(5, e.o.DeadLetter)
	}
	act := e.retryAction(capped)
	before := e.count(e.h.RetryKey())
	dec := e.decide(p, d, engine.Retry(), nil, time.Now(), act)
	e.mustSettle(dec.Settlement)
	written := e.since(e.h.RetryKey(), before)
	switch act {
	case engine.ActRequeue:
		if len(written) != 1 {
			e.t.Fatalf("%d copies written to %s, want 1", len(written), e.h.RetryKey())
		}
		e.same("the retry copy", written[0], with(d.Headers, engine.HeaderRetryCount, "1"), d.Payload)
		e.unsettled(0)
	case engine.ActLeave:
		if len(written) != 0 {
			e.t.Fatalf("a retry in place wrote %d messages", len(written))
		}
		e.unsettled(1)
	case engine.ActAck:
		if dec.Note == "" || len(written) != 0 {
			e.t.Fatalf("an uncapped retry without acknowledgement wrote %d messages (note %q), want none and a note", len(written), dec.Note)
		}
	}
	if e.h.Kind(e.t, e.o.DeadLetter) != "" {
		e.t.Fatal("a retry wrote a dead letter")
	}
}

// settleRetryAfter: SPEC §4's retry_after row: stored durably where the transport can, left
// pending on claiming sources, otherwise the original is acknowledged and the engine's runtime
// copy is written when due (Requeue).
func settleRetryAfter(e *env) {
	e.start(0)
	d := e.deliverStopped(msg("p", "h", "v"))[0]
	now := time.Now()
	before := e.count(e.h.RetryKey())
	p := e.policy(0, "")
	switch {
	case e.f.RetryInPlace:
		dec := e.decide(p, d, engine.RetryAfter(time.Hour), nil, now, engine.ActLeave)
		if want := now.Add(time.Hour - e.caps.MinIdle); !dec.Settlement.HoldUntil.Equal(want) {
			e.t.Fatalf("hold until %s, want %s", dec.Settlement.HoldUntil, want)
		}
		e.mustSettle(dec.Settlement)
		e.unsettled(1)
	case e.f.DurableDelay:
		dec := e.decide(p, d, engine.RetryAfter(time.Hour), nil, now, engine.ActDelay)
		e.mustSettle(dec.Settlement)
		e.unsettled(0)
		dl := e.h.Delayed(e.t)
		if len(dl) != 1 {
			e.t.Fatalf("%d delayed copies stored, want 1", len(dl))
		}
		e.same("the delayed copy", dl[0].Message, with(d.Headers, engine.HeaderRetryCount, "1"), d.Payload)
		if want := now.Add(time.Hour).UnixMilli(); dl[0].Due.UnixMilli() != want {
			e.t.Fatalf("due %s, want %s", dl[0].Due, time.UnixMilli(want))
		}
	default:
		dec := e.decide(p, d, engine.RetryAfter(time.Hour), nil, now, engine.ActAck)
		if dec.Hold == nil || !dec.HoldDue.Equal(now.Add(time.Hour)) {
			e.t.Fatalf("no runtime copy held for an hour: %+v", dec)
		}
		e.mustSettle(dec.Settlement)
		e.unsettled(0)
		if n := e.count(e.h.RetryKey()); n != before {
			e.t.Fatalf("%d messages written before the delay is up", n-before)
		}
		// The delay is up: the engine writes the held copy.
		if err := e.src.Requeue(context.Background(), []*engine.Message{dec.Hold}); err != nil {
			e.t.Fatalf("Requeue = %v", err)
		}
		written := e.since(e.h.RetryKey(), before)
		if len(written) != 1 {
			e.t.Fatalf("%d copies written when due, want 1", len(written))
		}
		e.same("the runtime delayed copy", written[0], with(d.Headers, engine.HeaderRetryCount, "1"), d.Payload)
		return
	}
	if n := e.count(e.h.RetryKey()); n != before {
		e.t.Fatalf("%d messages written to %s for a delay", n-before, e.h.RetryKey())
	}
}

// settleDeadLetter: a dead letter (SPEC §5) is written to a key of the source's own kind with
// the message's headers and payload plus the headers of §6, before the original is
// acknowledged.
func settleDeadLetter(e *env) {
	e.start(0)
	d := e.deliverStopped(msg("p", "h", "v"))[0]
	now := time.Now()
	before := e.count(e.h.RetryKey())
	dec := e.decide(e.policy(0, e.o.DeadLetter), d, engine.DeadLetter("bad"), nil, now, engine.ActDeadLetter)
	e.mustSettle(dec.Settlement)
	e.unsettled(0)
	dls := e.h.Read(e.t, e.o.DeadLetter)
	if len(dls) != 1 {
		e.t.Fatalf("%d dead letters, want 1", len(dls))
	}
	if k := e.h.Kind(e.t, e.o.DeadLetter); k != e.f.DeadLetter {
		e.t.Fatalf("the dead letter is a %s, want a %s", k, e.f.DeadLetter)
	}
	e.same("the dead letter", dls[0], e.deadLetterHeaders(d, "bad", now), d.Payload)
	if n := e.count(e.h.RetryKey()); n != before {
		e.t.Fatalf("a dead letter wrote %d messages to %s", n-before, e.h.RetryKey())
	}
}

// settleUnsupported: an action the transport cannot carry out is a permanent fault of that
// delivery (engine.ErrUnsupported), which stays unsettled, while the rest of the batch is
// settled.
func settleUnsupported(e *env) {
	e.start(0)
	var acts []engine.Action
	if !e.f.Leave {
		acts = append(acts, engine.ActLeave)
	}
	if !e.f.DurableDelay {
		acts = append(acts, engine.ActDelay)
	}
	var in []*engine.Message
	for i := range 3 * len(acts) {
		in = append(in, msg(fmt.Sprintf("u%d", i)))
	}
	ds := e.deliverStopped(in...)
	before := e.count(e.h.RetryKey())
	for j, act := range acts {
		d := ds[3*j : 3*j+3]
		batch := []engine.Settlement{
			{Delivery: d[0], Action: engine.ActAck},
			{Delivery: d[1], Action: act, Copy: d[1].RetryCopy(), Due: time.Now()},
			{Delivery: d[2], Action: engine.ActAck},
		}
		fs := e.faults(e.settle(batch))
		if len(fs) != 1 || fs[0].Index != 1 || !fs[0].Permanent || !errors.Is(fs[0], engine.ErrUnsupported) {
			e.t.Fatalf("%s: faults %+v, want one permanent engine.ErrUnsupported at index 1", act, fs)
		}
	}
	e.unsettled(len(acts))
	if n := e.count(e.h.RetryKey()); n != before || e.h.Kind(e.t, e.o.DeadLetter) != "" {
		e.t.Fatalf("unsupported actions wrote %d messages", n-before)
	}
}

// attemptsCountOn: a retried delivery comes back with the attempt one higher: a copy carries
// x-retry-count one higher than the delivery it replaces; an entry left in place has its
// delivery count raised (SPEC §5, §6).
func attemptsCountOn(e *env) {
	e.start(0)
	r, ds := e.deliver(msg("p", "h", "v"))
	d := ds[0]
	p := e.policy(5, e.o.DeadLetter)
	for attempt := 1; attempt <= 2; attempt++ {
		if d.Attempt != attempt {
			e.t.Fatalf("attempt %d, want %d", d.Attempt, attempt)
		}
		dec := e.decide(p, d, engine.Retry(), nil, time.Now(), e.retryAction(true))
		left := time.Now()
		e.mustSettle(dec.Settlement)
		next := r.Next(e.t)
		e.number(next)
		if e.f.RetryInPlace {
			if waited := time.Since(left); waited < e.caps.MinIdle-20*time.Millisecond {
				e.t.Fatalf("taken back after %s, before min_idle %s", waited, e.caps.MinIdle)
			}
			count := attempt
			if e.f.CountsThisDelivery {
				count++
			}
			idle, _ := strconv.ParseInt(next.Headers[engine.HeaderIdleMS], 10, 64)
			if next.ID != d.ID || next.DeliveryCount != count || next.Headers[engine.HeaderDeliveryCount] != strconv.Itoa(count) ||
				idle != next.IdleMS || idle < e.caps.MinIdle.Milliseconds() {
				e.t.Fatalf("taken back: id %s count %d headers %v; want id %s, x-delivery-count %d and x-idle-ms ≥ min_idle",
					next.ID, next.DeliveryCount, next.Headers, d.ID, count)
			}
		} else {
			if next.Key != e.h.RetryKey() {
				e.t.Fatalf("the copy came from %q, want %q", next.Key, e.h.RetryKey())
			}
			e.same("the copy read back", &next.Message, with(d.Headers, engine.HeaderRetryCount, strconv.Itoa(attempt)), d.Payload)
		}
		d = next
	}
	if d.Attempt != 3 {
		e.t.Fatalf("attempt %d after two retries, want 3", d.Attempt)
	}
	e.mustSettle(engine.Settlement{Delivery: d, Action: engine.ActAck})
	if err := r.Stop(e.t); err != nil {
		e.t.Fatal(err)
	}
	e.unsettled(0)
}

// attemptMessage is a message whose first delivery here is attempt 3 where the attempt is
// counted from x-retry-count, and 1 where Redis counts deliveries.
func attemptMessage() *engine.Message { return msg("p", "h", "v", engine.HeaderRetryCount, "2") }

// capAfter: with max_attempts = N, a retry asked for on attempt N goes to the dead letter, with
// x-attempts N and the handler's error in the reason (SPEC §5).
func capAfter(e *env) {
	e.start(0)
	d := e.deliverStopped(attemptMessage())[0]
	now := time.Now()
	n := d.Attempt
	before := e.count(e.h.RetryKey())
	dec := e.decide(e.policy(n, e.o.DeadLetter), d, engine.Retry(), errors.New("boom"), now, engine.ActDeadLetter)
	e.mustSettle(dec.Settlement)
	e.unsettled(0)
	dls := e.h.Read(e.t, e.o.DeadLetter)
	if len(dls) != 1 {
		e.t.Fatalf("%d dead letters, want 1", len(dls))
	}
	e.same("the dead letter", dls[0], e.deadLetterHeaders(d, fmt.Sprintf("max_attempts %d reached: boom", n), now), d.Payload)
	if c := e.count(e.h.RetryKey()); c != before {
		e.t.Fatalf("a capped retry wrote %d copies", c-before)
	}
}

// capBefore: a delivery whose attempt is already past the cap goes to the dead letter without
// its handler, with that attempt in x-attempts (SPEC §5).
func capBefore(e *env) {
	e.start(0)
	var d *engine.Delivery
	if e.f.DeliveryCount {
		// Attempt 2: deliver, leave it, take it back.
		r, ds := e.deliver(msg("p", "h", "v"))
		e.mustSettle(engine.Settlement{Delivery: ds[0], Action: engine.ActLeave})
		d = r.Next(e.t)
		e.number(d)
		if err := r.Stop(e.t); err != nil {
			e.t.Fatal(err)
		}
	} else {
		d = e.deliverStopped(msg("p", "h", "v", engine.HeaderRetryCount, "3"))[0]
	}
	limit := d.Attempt - 1
	now := time.Now()
	dec, ok := e.policy(limit, e.o.DeadLetter).Before(d, now)
	if !ok || dec.Settlement.Action != engine.ActDeadLetter {
		e.t.Fatalf("attempt %d with max_attempts %d: %+v, want a dead letter before the handler", d.Attempt, limit, dec)
	}
	e.mustSettle(dec.Settlement)
	e.unsettled(0)
	dls := e.h.Read(e.t, e.o.DeadLetter)
	if len(dls) != 1 {
		e.t.Fatalf("%d dead letters, want 1", len(dls))
	}
	reason := fmt.Sprintf("attempt %d exceeds max_attempts %d", d.Attempt, limit)
	e.same("the dead letter", dls[0], e.deadLetterHeaders(d, reason, now), d.Payload)
}

// capWithoutDeadLetter: past the cap without a dead_letter, the delivery is acknowledged as
// rejected and nothing is written (SPEC §5).
func capWithoutDeadLetter(e *env) {
	e.start(0)
	d := e.deliverStopped(attemptMessage())[0]
	before := e.count(e.h.RetryKey())
	dec := e.decide(e.policy(d.Attempt, ""), d, engine.Retry(), nil, time.Now(), engine.ActAck)
	if dec.Label != engine.OutcomeRejected {
		e.t.Fatalf("label %q, want %q", dec.Label, engine.LabelRejected)
	}
	e.mustSettle(dec.Settlement)
	e.unsettled(0)
	if n := e.count(e.h.RetryKey()); n != before || e.h.Kind(e.t, e.o.DeadLetter) != "" {
		e.t.Fatalf("a rejected delivery wrote %d messages", n-before)
	}
}

// delaysRuntime: the engine's held copies, written by Requeue when due, go to the source's key
// (retry_to, out_retry) in order, as they are; a source that reads its key delivers them with
// the attempt their x-retry-count says (SPEC §5).
func delaysRuntime(e *env) {
	e.start(0)
	in := []*engine.Message{
		{Key: e.h.Key(), Headers: map[string]string{engine.HeaderRetryCount: "1", "h": "v"}, Payload: []byte("r1")},
		{Key: e.h.Key(), Headers: map[string]string{engine.HeaderRetryCount: "2"}, Payload: []byte(`{"n":2}`)},
	}
	var r *Receiver
	if e.f.ReadsCopies && e.f.Live {
		r = e.receive() // what is published before it subscribes is lost
	}
	before := e.count(e.h.RetryKey())
	if err := e.src.Requeue(context.Background(), in); err != nil {
		e.t.Fatalf("Requeue = %v", err)
	}
	if in[0].Key != e.h.Key() {
		e.t.Fatal("Requeue changed the caller's message")
	}
	written := e.since(e.h.RetryKey(), before)
	if len(written) != 2 {
		e.t.Fatalf("%d copies written, want 2", len(written))
	}
	for i, w := range written {
		e.same(fmt.Sprintf("copy %d", i), w, in[i].Headers, in[i].Payload)
	}
	if !e.f.ReadsCopies {
		return
	}
	if r == nil {
		r = e.receive()
	}
	for i, d := range r.Take(e.t, 2) {
		e.number(d)
		e.same(fmt.Sprintf("copy %d read back", i), &d.Message, with(in[i].Headers, countHeaders(e, d)...), in[i].Payload)
		if !e.f.DeliveryCount && d.Attempt != i+2 {
			e.t.Fatalf("copy %d read back as attempt %d, want %d", i, d.Attempt, i+2)
		}
	}
}

// countHeaders are the §6 headers a claiming source adds to a delivery d.
func countHeaders(e *env, d *engine.Delivery) []string {
	if !e.f.DeliveryCount {
		return nil
	}
	return []string{engine.HeaderDeliveryCount, d.Headers[engine.HeaderDeliveryCount], engine.HeaderIdleMS, d.Headers[engine.HeaderIdleMS]}
}

// delaysDurable: a durable delay is stored, not delivered before it is due, and comes back by
// itself once due, as a copy with x-retry-count one higher (SPEC §5 durable_zset).
func delaysDurable(e *env) {
	e.start(0)
	r, ds := e.deliver(msg("p", "h", "v"))
	d := ds[0]
	const delay = 400 * time.Millisecond
	now := time.Now()
	dec := e.decide(e.policy(0, ""), d, engine.RetryAfter(delay), nil, now, engine.ActDelay)
	e.mustSettle(dec.Settlement)
	if n := len(e.h.Delayed(e.t)); n != 1 {
		e.t.Fatalf("%d delayed copies stored, want 1", n)
	}
	back := r.Next(e.t)
	if early := now.Add(delay).Sub(time.Now()); early > 10*time.Millisecond {
		e.t.Fatalf("delayed copy delivered %s before it was due", early)
	}
	e.number(back)
	e.same("the delayed copy", &back.Message, with(d.Headers, engine.HeaderRetryCount, "1"), d.Payload)
	if back.Attempt != 2 {
		e.t.Fatalf("the delayed copy is attempt %d, want 2", back.Attempt)
	}
	if n := len(e.h.Delayed(e.t)); n != 0 {
		e.t.Fatalf("%d delayed copies left after it came back", n)
	}
	e.mustSettle(engine.Settlement{Delivery: back, Action: engine.ActAck})
	if err := r.Stop(e.t); err != nil {
		e.t.Fatal(err)
	}
	e.unsettled(0)
}

// delaysInPlace: on a claiming source, retry_after(d) leaves the entry pending: a delay shorter
// than min_idle waits min_idle; a longer one is honoured by keeping the entry from looking idle
// until d − min_idle (SPEC §4).
func delaysInPlace(e *env) {
	e.start(0)
	r, ds := e.deliver(msg("p"))
	d := ds[0]
	minIdle := e.caps.MinIdle
	for _, delay := range []time.Duration{minIdle / 2, 3 * minIdle} {
		now := time.Now()
		dec := e.decide(e.policy(0, ""), d, engine.RetryAfter(delay), nil, now, engine.ActLeave)
		e.mustSettle(dec.Settlement)
		back := r.Next(e.t)
		earliest := now.Add(max(delay, minIdle) - 20*time.Millisecond)
		if at := time.Now(); at.Before(earliest) {
			e.t.Fatalf("retry_after(%s) taken back %s early", delay, earliest.Sub(at))
		}
		e.number(back)
		if back.ID != d.ID || back.Attempt != d.Attempt+1 {
			e.t.Fatalf("taken back %s attempt %d, want %s attempt %d", back.ID, back.Attempt, d.ID, d.Attempt+1)
		}
		d = back
	}
	e.mustSettle(engine.Settlement{Delivery: d, Action: engine.ActAck})
	if err := r.Stop(e.t); err != nil {
		e.t.Fatal(err)
	}
	e.unsettled(0)
}

// mixedBatch is a batch of every outcome, as the engine's policy settles them on this source:
// ack, retry, dead letter, retry_after (under a cap and a dead letter).
func (e *env) mixedBatch(ds []*engine.Delivery) []engine.Settlement {
	p := e.policy(5, e.o.DeadLetter)
	now := time.Now()
	out := make([]engine.Settlement, len(ds))
	for i, o := range []engine.Outcome{engine.Ack(), engine.Retry(), engine.DeadLetter("x"), engine.RetryAfter(time.Hour)} {
		out[i] = p.Decide(ds[i], o, nil, now).Settlement
	}
	return out
}

func countActions(batch []engine.Settlement, act engine.Action) int {
	n := 0
	for _, st := range batch {
		if st.Action == act {
			n++
		}
	}
	return n
}

// idempotentAgain: a batch settled again (a lost reply, a resend) writes no copy, dead letter
// or delayed copy twice (SPEC §10).
func idempotentAgain(e *env) {
	e.start(0)
	ds := e.deliverStopped(msg("a"), msg("b"), msg("c"), msg("d"))
	batch := e.mixedBatch(ds)
	before := e.count(e.h.RetryKey())
	for range 3 {
		e.mustSettle(batch...)
	}
	if n := len(e.since(e.h.RetryKey(), before)); n != countActions(batch, engine.ActRequeue) {
		e.t.Fatalf("%d copies after settling three times, want %d", n, countActions(batch, engine.ActRequeue))
	}
	if n := e.count(e.o.DeadLetter); n != 1 {
		e.t.Fatalf("%d dead letters after settling three times, want 1", n)
	}
	if e.f.DurableDelay {
		if n := len(e.h.Delayed(e.t)); n != countActions(batch, engine.ActDelay) {
			e.t.Fatalf("%d delayed copies after settling three times, want %d", n, countActions(batch, engine.ActDelay))
		}
	}
	e.unsettled(countActions(batch, engine.ActLeave))
}

// poisoned runs a batch in which delivery 1's dead letter goes to a poisoned key and checks
// the faults: permanent, of the deliveries whose writes the poison reaches only (every copy of
// the batch where the output is shared), naming the command, key and reason.
func (e *env) poisoned(batch []engine.Settlement, poisonKey string) []int {
	e.t.Helper()
	faultKey := e.h.Poison(e.t, poisonKey)
	fs := e.faults(e.settle(batch))
	var want []int
	for i, st := range batch {
		writes := st.Action == engine.ActRequeue || st.Action == engine.ActDeadLetter || st.Action == engine.ActDelay
		if (e.f.SharedOutput && writes) || (st.Action == engine.ActDeadLetter && st.DeadLetterKey == poisonKey) {
			want = append(want, i)
		}
	}
	var got []int
	for _, f := range fs {
		got = append(got, f.Index)
		if !f.Permanent || f.Key != faultKey || f.Command != e.f.PoisonCommand || f.Reason != e.f.PoisonReason || f.Err == nil {
			e.t.Errorf("fault %+v: want a permanent %s %s fault (%s) with the server's error", f, e.f.PoisonCommand, faultKey, e.f.PoisonReason)
		}
		// Redis's own error text, not a generic one (SPEC §10): "WRONGTYPE Operation against…".
		if code := strings.ToUpper(e.f.PoisonReason); !e.f.SharedOutput && !strings.Contains(f.Error(), code) {
			e.t.Errorf("fault %q does not carry the server's %s", f.Error(), code)
		}
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("faults of deliveries %v, want %v: %+v", got, want, fs)
	}
	return want
}

// idempotentPartial: a batch resent after a partial failure writes only what had failed: each
// copy and dead letter is written once (SPEC §10).
func idempotentPartial(e *env) {
	e.start(0)
	ds := e.deliverStopped(msg("a"), msg("b"), msg("c"), msg("d"))
	poison := e.o.DeadLetter + ".poisoned"
	p := e.policy(5, e.o.DeadLetter)
	now := time.Now()
	batch := []engine.Settlement{
		e.decide(p, ds[0], engine.Retry(), nil, now, e.retryAction(true)).Settlement,
		e.decide(e.policy(5, poison), ds[1], engine.DeadLetter("x"), nil, now, engine.ActDeadLetter).Settlement,
		e.decide(p, ds[2], engine.DeadLetter("x"), nil, now, engine.ActDeadLetter).Settlement,
		e.decide(p, ds[3], engine.Ack(), nil, now, engine.ActAck).Settlement,
	}
	before := e.count(e.h.RetryKey())
	e.poisoned(batch, poison)
	e.h.Heal(e.t, poison)
	for range 2 { // the resend, and once more for good measure
		e.mustSettle(batch...)
	}
	if n := len(e.since(e.h.RetryKey(), before)); n != countActions(batch, engine.ActRequeue) {
		e.t.Fatalf("%d copies, want %d", n, countActions(batch, engine.ActRequeue))
	}
	if a, b := e.count(poison), e.count(e.o.DeadLetter); a != 1 || b != 1 {
		e.t.Fatalf("dead letters %d and %d, want one each", a, b)
	}
	e.unsettled(countActions(batch, engine.ActLeave))
}

// isolation: a permanent failure of one delivery's settlement is a permanent fault of that
// delivery only; the others are settled; it stays unsettled and, abandoned by the engine
// (engine.Releaser), comes back by its source's own rules (SPEC §10).
func isolation(e *env) {
	e.start(0)
	ds := e.deliverStopped(msg("a"), msg("b"), msg("c"), msg("d"))
	poison := e.o.DeadLetter + ".poisoned"
	now := time.Now()
	batch := []engine.Settlement{
		{Delivery: ds[0], Action: engine.ActAck},
		e.decide(e.policy(0, poison), ds[1], engine.DeadLetter("x"), nil, now, engine.ActDeadLetter).Settlement,
		e.decide(e.policy(0, e.o.DeadLetter), ds[2], engine.DeadLetter("x"), nil, now, engine.ActDeadLetter).Settlement,
		{Delivery: ds[3], Action: engine.ActAck},
	}
	failed := e.poisoned(batch, poison)
	e.unsettled(len(failed))
	want := 1 // the healthy dead letter, unless the poison reached every copy
	if e.f.SharedOutput {
		want = 0
	}
	if n := e.count(e.o.DeadLetter); n != want {
		e.t.Fatalf("%d dead letters written beside the failed one, want %d", n, want)
	}
	rel, releases := e.src.(engine.Releaser)
	var left []string
	for _, i := range failed {
		if releases {
			rel.Release(batch[i])
		}
		left = append(left, string(ds[i].Payload))
	}
	if e.f.Redelivers {
		e.expectBack(e.restart(), left)
	}
}
