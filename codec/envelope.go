package codec

import (
	"encoding/json"

	"github.com/flowrun/flowrun/engine"
)

// DecodeEnvelope splits a list element or Pub/Sub message into headers and payload. An
// envelope's payload is decoded as a record's is (a string's bytes, else the compact JSON
// text). Anything that is not an envelope is a bare payload: b itself (not copied) with empty
// headers. headers is never nil.
func DecodeEnvelope(b []byte) (headers map[string]string, payload []byte) {
	if h, p, ok := decodeEnvelope(b); ok {
		return h, p
	}
	return make(map[string]string), b
}

func decodeEnvelope(b []byte) (map[string]string, []byte, bool) {
	// Cheap test first: most bare payloads are not objects, and json.Valid reads everything.
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' || !json.Valid(b) {
		return nil, nil, false
	}
	var (
		h       map[string]string
		payload []byte
		havePay bool
	)
	it := newObjectIter(b, i)
	for {
		name, v, ok := it.next()
		if !ok {
			break
		}
		switch string(name) {
		case "payload":
			payload = decodePayload(v)
			havePay = true
		case "headers":
			if h, ok = decodeHeaders(v, false); !ok {
				return nil, nil, false
			}
		default:
			return nil, nil, false
		}
	}
	if !havePay {
		return nil, nil, false
	}
	if h == nil {
		h = make(map[string]string)
	}
	return h, payload, true
}

// EncodeEnvelope returns what goes on a list or channel for m: an envelope
// {"headers":{...},"payload":...} when m has headers, else the bare payload bytes (m.Payload
// itself, not copied). One exception keeps payloads faithful: a header-less payload that would
// itself read back as an envelope is wrapped, or a reader would strip it.
func EncodeEnvelope(m *engine.Message) []byte {
	if len(m.Headers) == 0 {
		if _, _, ok := decodeEnvelope(m.Payload); !ok {
			return m.Payload
		}
		dst := make([]byte, 0, len(m.Payload)+16)
		dst = append(dst, `{"payload":`...)
		dst = appendPayload(dst, m.Payload)
		return append(dst, '}')
	}
	dst := make([]byte, 0, len(m.Payload)+64)
	dst = append(dst, `{"headers":`...)
	dst = appendHeaders(dst, m.Headers)
	dst = append(dst, `,"payload":`...)
	dst = appendPayload(dst, m.Payload)
	return append(dst, '}')
}
