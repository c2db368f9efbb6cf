package codec

import (
	"fmt"
	"slices"

	"github.com/flowrun/flowrun/engine"
)

// StreamPayloadField is the stream entry field that holds a message's payload (SPEC §3); every
// other field is a header.
const StreamPayloadField = "payload"

// StreamFields returns the XADD field/value list for m, the one stream-entry encoder of every
// transport that writes entries (stream copies and dead letters, durable delays, Pub/Sub dead
// letters, stream emits): its headers in name order, then the payload field. The payload field
// is written only when the payload is non-empty, so a copy of an entry from another producer
// (`XADD orders * id 7 amount 12`, headers and no payload) keeps its shape, or when the entry
// would otherwise have no field at all, since XADD needs one. A header named "payload" is
// shadowed by the payload and not written. Read back with DecodeStream, the entry is m again.
func StreamFields(m *engine.Message) []string {
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if k != StreamPayloadField {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	f := make([]string, 0, 2*len(names)+2)
	for _, k := range names {
		f = append(f, k, m.Headers[k])
	}
	if len(m.Payload) > 0 || len(f) == 0 {
		f = append(f, StreamPayloadField, string(m.Payload))
	}
	return f
}

// AppendStreamArgs appends StreamFields(m) to args as command arguments, the payload as its
// bytes: an XADD laid out in one list, with no []string of the fields built and boxed again
// (go-redis's XAdd boxes every value) and no copy of the payload.
func AppendStreamArgs(args []any, m *engine.Message) []any {
	var room [8]string
	names := room[:0]
	for k := range m.Headers {
		if k != StreamPayloadField {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		args = append(args, k, m.Headers[k])
	}
	if len(m.Payload) > 0 || len(names) == 0 {
		args = append(args, StreamPayloadField, m.Payload)
	}
	return args
}

// DecodeStream sets m's headers (never nil) and payload from a stream entry's fields, as
// go-redis returns them: the field "payload" is the payload, every other field a header. An
// entry without that field is a valid message with an empty payload (SPEC §3).
func DecodeStream(m *engine.Message, values map[string]any) {
	DecodeStreamRoom(m, values, 0)
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
}

// DecodeStreamRoom is DecodeStream with room for extra more headers, for a source that adds
// its own (claiming's delivery count and idle time): the map is sized once, not grown. Unlike
// DecodeStream it leaves the headers nil for an entry with no field but the payload (the most
// common entry), for the source to share one map among such entries or leave it to the engine.
func DecodeStreamRoom(m *engine.Message, values map[string]any, extra int) {
	m.Headers, m.Payload = nil, nil
	for k, v := range values {
		s, ok := v.(string)
		if !ok {
			s = fmt.Sprint(v)
		}
		if k == StreamPayloadField {
			m.Payload = []byte(s)
			continue
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(values)+extra)
		}
		m.Headers[k] = s
	}
}
