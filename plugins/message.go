package plugins

import (
	"bytes"
	"iter"
	"slices"

	"github.com/flowrun/flowrun/engine"
)

// Message is a read-only view of the delivery a handler is given: the message (SPEC §3) and how
// often it was tried. The engine keeps the message; nothing a handler does to what Message
// returns changes it, and a Message must not be kept after Handle returns.
type Message struct {
	d *engine.Delivery
}

// Key is the stream, list, channel or record key the message came from.
func (m Message) Key() string {
	if m.d == nil {
		return ""
	}
	return m.d.Key
}

// ID is the stream entry id or the record's line number; empty where the source has none
// (lists, Pub/Sub).
func (m Message) ID() string {
	if m.d == nil {
		return ""
	}
	return m.d.ID
}

// Header is the value of the named header, "" when the message has none of that name. Names
// are exact (case-sensitive), as in the rules' headers['name'].
func (m Message) Header(name string) string {
	v, _ := m.LookupHeader(name)
	return v
}

// LookupHeader is the value of the named header and whether the message has it.
func (m Message) LookupHeader(name string) (string, bool) {
	if m.d == nil {
		return "", false
	}
	v, ok := m.d.Headers[name]
	return v, ok
}

// Headers yields every header, in name order. maps.Collect(m.Headers()) is a copy to change,
// for instance to emit with.
func (m Message) Headers() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		if m.d == nil {
			return
		}
		names := make([]string, 0, len(m.d.Headers))
		for k := range m.d.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			if !yield(k, m.d.Headers[k]) {
				return
			}
		}
	}
}

// ForwardHeaders is a new map of the message's headers but flowrun's own x- headers, as an
// emit's forward_headers = true writes them (SPEC §7): the handler's to change and emit with,
// e.Emit(to, payload, m.ForwardHeaders()) carrying tenant, trace and the like downstream. Delete a
// name to leave it out; never nil.
func (m Message) ForwardHeaders() map[string]string {
	if m.d == nil {
		return map[string]string{}
	}
	return engine.ForwardHeaders(m.d.Headers, 2)
}

// Payload is a copy of the payload's bytes, the caller's to keep or change.
func (m Message) Payload() []byte {
	if m.d == nil {
		return nil
	}
	return bytes.Clone(m.d.Payload)
}

// PayloadReader reads the payload without copying it: for a large payload sent on (an HTTP
// request body, a process's stdin).
func (m Message) PayloadReader() *bytes.Reader {
	if m.d == nil {
		return bytes.NewReader(nil)
	}
	return bytes.NewReader(m.d.Payload)
}

// Attempt is 1 for a first delivery, 2 for the first retry and so on (SPEC §5): the attempt a
// retry would count against max_attempts.
func (m Message) Attempt() int {
	if m.d == nil {
		return 0
	}
	return m.d.Attempt
}

// DeliveryCount is how often the server delivered the entry, for claiming and reclaim sources
// (as in the x-delivery-count header); 0 elsewhere.
func (m Message) DeliveryCount() int {
	if m.d == nil {
		return 0
	}
	return m.d.DeliveryCount
}

// IdleMS is how long the entry sat pending before it was claimed, in milliseconds, for claiming
// and reclaim sources (as in the x-idle-ms header); 0 elsewhere.
func (m Message) IdleMS() int64 {
	if m.d == nil {
		return 0
	}
	return m.d.IdleMS
}
