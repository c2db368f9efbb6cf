// Package engine owns the meaning of a delivery: messages, outcomes, attempt numbers, the
// max_attempts cap, dead letters, delayed copies, concurrency and graceful shutdown. It decides
// what happens to a delivery and never speaks a wire command; transports do that.
package engine

import (
	"strconv"
	"strings"
)

// Header names flowrun sets (SPEC §6).
const (
	HeaderRetryCount       = "x-retry-count"
	HeaderDeliveryCount    = "x-delivery-count"
	HeaderIdleMS           = "x-idle-ms"
	HeaderDeadLetterReason = "x-dead-letter-reason"
	HeaderOriginalKey      = "x-original-key"
	HeaderOriginalID       = "x-original-id"
	HeaderAttempts         = "x-attempts"
	HeaderFailedAt         = "x-failed-at"
	// HeaderIdempotencyKey is set on every workflow step visit (SPEC §16); http sends it as
	// Idempotency-Key.
	HeaderIdempotencyKey = "x-idempotency-key"
	// HeaderRunID names a workflow run on its dead letters (SPEC §16).
	HeaderRunID = "x-run-id"
	// HeaderScheduledAt is the tick a schedule source's message is for (SPEC §17).
	HeaderScheduledAt = "x-scheduled-at"
)

// Message is what flows through a pipeline (SPEC §3).
type Message struct {
	Key string // the stream, list, channel or record key it came from
	ID  string // stream entry id, record line number, empty elsewhere
	// Headers is never nil on a delivery. A delivery's headers are read-only once received: a
	// source may share one map among its deliveries (the stream kinds share one among entries
	// with no field but the payload), so the engine, the rules and handlers write only into
	// copies (Clone).
	Headers map[string]string
	Payload []byte
	// Form is how the payload arrived on the wire (SPEC §3), so that a copy, delayed copy or
	// dead letter writes it back the same way. The zero value, FormBare, is plain bytes.
	Form PayloadForm
}

// PayloadForm is how a payload travelled in an envelope or record (SPEC §3).
type PayloadForm uint8

const (
	// FormBare: bytes as they are (a bare list element or Pub/Sub message, a stream field, an
	// emit's result); written where JSON is needed in whichever form keeps every byte.
	FormBare PayloadForm = iota
	// FormString: a JSON string, whose bytes are the payload ("true" stays a string).
	FormString
	// FormJSON: another JSON value, whose text is the payload (12345678901234567890 stays a number).
	FormJSON
	// FormBase64: a string with "encoding": "base64" beside it, whose decoded bytes are the payload.
	FormBase64
)

// ForwardHeaders returns a new map of h's headers but flowrun's own x- headers (SPEC §7
// forward_headers), with room for extra more.
func ForwardHeaders(h map[string]string, extra int) map[string]string {
	out := make(map[string]string, len(h)+extra)
	for k, v := range h {
		if !strings.HasPrefix(k, "x-") {
			out[k] = v
		}
	}
	return out
}

// Clone returns a deep copy whose headers may be changed freely.
func (m *Message) Clone() *Message {
	c := &Message{Key: m.Key, ID: m.ID, Payload: m.Payload, Form: m.Form}
	c.Headers = make(map[string]string, len(m.Headers)+1)
	for k, v := range m.Headers {
		c.Headers[k] = v
	}
	return c
}

// RetryCount reads x-retry-count; absent or malformed counts as 0.
func (m *Message) RetryCount() int {
	v, ok := m.Headers[HeaderRetryCount]
	if !ok {
		return 0 // an original: the common case, without Atoi's error allocation
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Delivery is one receipt of a message by a source. The transport fills Message, Token and, where
// it counts deliveries itself (Capabilities.DeliveryCount), Attempt, DeliveryCount and IdleMS.
type Delivery struct {
	Message
	// Attempt is 1 for a first delivery. The engine sets it from x-retry-count unless the source
	// counts deliveries natively.
	Attempt       int
	DeliveryCount int   // claiming/reclaim: as in the x-delivery-count header
	IdleMS        int64 // claiming/reclaim: as in the x-idle-ms header
	// Token is the transport's own handle for settling this delivery (an entry id, the exact
	// element bytes, a byte offset). The engine never looks inside.
	Token any
	// Decoded caches what an expression made of the payload (package rules: its JSON value),
	// so that a flow-control key and the rules decode it once between them. Set by whoever
	// decodes first; the payload must not change afterwards. The engine drops it once the
	// handler has returned.
	Decoded any
	// Run is the workflow run a step visit belongs to (SPEC §16); nil outside workflows.
	Run *Run
}

// RetryCopy returns the copy that replaces d on a retry: same key, headers and payload, with
// x-retry-count one higher than the delivery it replaces (SPEC §5).
func (d *Delivery) RetryCopy() *Message {
	c := d.Message.Clone()
	c.ID = ""
	c.Headers[HeaderRetryCount] = strconv.Itoa(d.Attempt)
	return c
}
