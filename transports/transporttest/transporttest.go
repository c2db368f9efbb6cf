// Package transporttest is the conformance suite of flowrun's transports (STYLE practice 12, the
// shape of Watermill's tests.TestPubSub): what SPEC §4–§6 and §10 ask of a source, written once,
// each row a table entry, run by every transport package against a real source (real
// redis-server processes, files and pipes) built by the package's own Harness over fresh keys:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Features{Ack: true, ...}, newHarness)
//	}
//
// The entries: the engine.Feed contract of Receive (never more read than Room allowed, nothing
// pushed after a stop, what was not handled comes back, a finite input ends); SPEC §4's
// settlement table, each outcome through the engine's own policy (engine.Policy), so the row a
// transport runs is the one its Capabilities select; §5's attempt numbers, caps, dead letters and
// delays (runtime copies through Requeue, durable ones where the transport stores them); §6's
// headers; and §10's idempotent settlement (a batch settled again, or resent after a partial
// failure, writes nothing twice) and failure isolation (a permanent failure of one delivery is a
// permanent fault of that delivery only, and it comes back by its source's own rules while the
// others are settled). Features says what a transport supports; an entry it cannot run is
// skipped, saying why.
//
// Receiver, which runs a source's Receive with the engine's feed and checks its contract, and
// Redis, the server side of a Redis harness, serve the transports' own tests as well.
package transporttest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// Kinds of what a key holds, as Harness.Kind names them.
const (
	KindStream  = "stream"
	KindList    = "list"
	KindChannel = "channel" // a Pub/Sub channel the harness watches
	KindRecord  = "record"  // records with that key in a stream file or on stdout
)

// Features says what a transport does (SPEC §4–§6). Run checks the first four against the
// source's engine.Capabilities, and skips, or adapts, the entries the others rule out.
type Features struct {
	// Ack: the source acknowledges natively (XACK, LREM from a processing list); what it has not
	// acknowledged is counted by Harness.Unsettled.
	Ack bool
	// RetryInPlace: a retry leaves the entry pending, taken back after min_idle with a delivery
	// count one higher (claiming, reclaim).
	RetryInPlace bool
	// DurableDelay: retry_after is stored by the transport (delayed_retry = durable_zset) and
	// comes back by itself when due; Harness.Delayed lists what is stored.
	DurableDelay bool
	// DeliveryCount: the attempt is Redis's delivery count, and deliveries carry
	// x-delivery-count and x-idle-ms (claiming, reclaim).
	DeliveryCount bool
	// CountsThisDelivery: x-delivery-count includes the delivery itself, 1 on a fresh entry
	// (reclaim); otherwise it counts the deliveries before it, 0 on a fresh entry (claiming).
	CountsThisDelivery bool
	// Leave: ActLeave is carried out (the delivery stays pending: taken back after min_idle, or
	// re-read at the stream source's next start); otherwise it is engine.ErrUnsupported.
	Leave bool
	// IDs: deliveries have ids (stream entry ids, record line numbers), and dead letters carry
	// x-original-id.
	IDs bool
	// DeadLetter is the kind of key dead letters are written to (KindStream, KindList,
	// KindRecord).
	DeadLetter string
	// Live: a message sent while the source is not subscribed is lost (Pub/Sub): the suite sends
	// only once the source is Ready.
	Live bool
	// Finite: Receive returns nil at the end of the input (Harness.End for a pipe, the end of a
	// file); otherwise it reads until stopped.
	Finite bool
	// ReadsCopies: a copy written to Harness.RetryKey (a retry, a runtime delayed copy) is
	// delivered again by the running source.
	ReadsCopies bool
	// Redelivers: what was left unsettled (read and never handled, or whose settlement failed)
	// comes back to a new source over the same keys (a stream's pending entries, a processing
	// list, a file before its checkpoint).
	Redelivers bool
	// SharedOutput: every copy goes to one output (a stream file, stdout), so Harness.Poison
	// fails every copy of a batch; acknowledgements still settle on their own.
	SharedOutput bool
	// PoisonCommand and PoisonReason are the Command and Reason of the engine.Fault a write to a
	// poisoned key fails with ("xadd", "wrongtype"; "append", "permission").
	PoisonCommand, PoisonReason string
}

// SourceOptions is what the suite asks of a harness: names fresh for the entry, so that nothing
// is shared with another entry, and the read size.
type SourceOptions struct {
	Key        string // the stream, list, channel or record key the source reads
	DeadLetter string // the pipeline's dead-letter key (a file source skips its records)
	Batch      int    // how much the source reads at once (Capabilities.Batch)
}

// Harness builds sources of one transport over the keys of SourceOptions, writes their input
// and looks at what they wrote.
type Harness interface {
	// Source returns a new source over the harness's keys: the first call the one under test, a
	// later one a restarted process's (the same consumer, processing list, checkpoint). The suite
	// closes what it gets. A transport whose input cannot be read twice (a pipe) fails the test
	// on a second call; the suite asks only where Features.Redelivers or an engine.Returner says
	// something comes back.
	Source(t testing.TB) engine.Source
	// Key is the key deliveries carry: SourceOptions.Key, or the channel messages are sent on.
	Key() string
	// RetryKey is where retry and runtime delayed copies go: Key, or retry_to, or out_retry.
	RetryKey() string
	// Inject makes msgs the source's input, in order (XADD, LPUSH, PUBLISH, a record appended
	// to the file, a line on the pipe); their Key is ignored.
	Inject(t testing.TB, msgs ...*engine.Message)
	// End ends a finite input (closes the pipe); nothing elsewhere.
	End(t testing.TB)
	// Read returns what key holds, oldest first, decoded per SPEC §3: stream entries, list
	// elements in read order, records with that key in the file or on stdout, or the messages
	// published to the channel since the harness began (a harness watches Key and RetryKey).
	Read(t testing.TB, key string) []*engine.Message
	// Kind is the kind of what key holds (KindStream, KindList, KindChannel, KindRecord), ""
	// when nothing is there.
	Kind(t testing.TB, key string) string
	// Unsettled counts deliveries read and not acknowledged (XPENDING's count, the processing
	// list's length); 0 without acknowledgement.
	Unsettled(t testing.TB) int
	// Delayed lists the durably delayed copies (Features.DurableDelay), in due order.
	Delayed(t testing.TB) []Delayed
	// Poison makes every later write to key fail permanently (a string where a stream or list
	// belongs; with Features.SharedOutput the output itself: an unwritable file, a closed
	// stdout) and returns the key a fault names (key, the file's path, "stdout").
	Poison(t testing.TB, key string) string
	// Heal undoes Poison.
	Heal(t testing.TB, key string)
}

// Delayed is one durably delayed copy.
type Delayed struct {
	Message *engine.Message
	Due     time.Time
}

// Run runs every entry of the suite against the transport, each in a subtest of its own with a
// harness of its own.
func Run(t *testing.T, f Features, newHarness func(t *testing.T, o SourceOptions) Harness) {
	t.Helper()
	for _, e := range entries {
		t.Run(e.name, func(t *testing.T) {
			if e.needs != nil {
				if why := e.needs(f); why != "" {
					t.Skip(why)
				}
			}
			e.run(&env{t: t, f: f, newHarness: newHarness})
		})
	}
}

// entry is one row of the suite; needs says why a transport with f cannot run it ("" when it
// can).
type entry struct {
	name  string
	needs func(f Features) string
	run   func(e *env)
}

var keySeq atomic.Int64

// uniqueKey names the keys of one entry after its test, unique within the process.
func uniqueKey(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '_'
	}, t.Name())
	return fmt.Sprintf("tt%d:%s", keySeq.Add(1), name)
}
