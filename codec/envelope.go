package codec

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"unicode/utf8"

	"github.com/flowrun/flowrun/engine"
)

// EnvelopeError is what DecodeEnvelopeInto reports for an object that is an envelope by its
// members (payload, and optionally headers and encoding) but cannot be read as one (SPEC §3:
// read as a bare payload, logged and counted). Offset is the byte in the element where the
// fault is.
type EnvelopeError struct {
	Offset int
	Reason string
}

func (e *EnvelopeError) Error() string {
	return fmt.Sprintf("malformed envelope at byte %d: %s", e.Offset, e.Reason)
}

// DecodeEnvelope splits a list element or Pub/Sub message into headers and payload, as
// DecodeEnvelopeInto does, dropping the form and the error. headers is never nil.
func DecodeEnvelope(b []byte) (headers map[string]string, payload []byte) {
	var m engine.Message
	_ = DecodeEnvelopeInto(b, &m) // a malformed envelope is a bare payload
	return m.Headers, m.Payload
}

// DecodeEnvelopeInto sets m's Headers (never nil), Payload and Form from a list element or Pub/Sub
// message (SPEC §3). An envelope's payload is decoded as a record's is (a string's bytes, base64's
// decoded bytes, else the compact JSON text). Anything that is not an envelope is a bare payload:
// b itself (not copied) with empty headers. A malformed envelope is a bare payload too, and the
// *EnvelopeError says where it went wrong.
func DecodeEnvelopeInto(b []byte, m *engine.Message) error {
	return DecodeEnvelopeShared(b, m, nil)
}

// DecodeEnvelopeShared is DecodeEnvelopeInto that gives a bare payload the headers map bare, when
// not nil, rather than a new one: a delivery's headers are read-only once received
// (engine.Message), so a source may share one empty map among the bare elements of a read.
func DecodeEnvelopeShared(b []byte, m *engine.Message, bare map[string]string) error {
	h, p, form, err := decodeEnvelope(b)
	if err != nil || h == nil {
		if bare == nil {
			bare = make(map[string]string)
		}
		m.Headers, m.Payload, m.Form = bare, b, engine.FormBare
		return err
	}
	m.Headers, m.Payload, m.Form = h, p, form
	return nil
}

// foreignObject reports whether the object at b[i] starts with a member no envelope has, by a
// name written without escapes: the user's own object, read bare whether or not it is valid
// JSON (an envelope has only payload, headers and encoding), so it need not be validated.
func foreignObject(b []byte, i int) bool {
	j := skipSpace(b, i+1)
	if j >= len(b) || b[j] != '"' {
		return false
	}
	end, escaped := skipString(b, j)
	if escaped || end > len(b) || b[end-1] != '"' || end-1 == j {
		return false // unfinished, or a name to unescape: the full path decides
	}
	switch string(b[j+1 : end-1]) {
	case "payload", "headers", "encoding":
		return false
	}
	return true
}

// offset is where v, a subslice of b, starts in b.
func offset(b, v []byte) int { return cap(b) - cap(v) }

// decodeEnvelope returns nil headers for a bare payload, and an error for a malformed envelope.
func decodeEnvelope(b []byte) (map[string]string, []byte, engine.PayloadForm, error) {
	// Cheap tests first: most bare payloads are not objects, or are objects whose first member
	// is not an envelope's, and json.Valid reads everything.
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' || foreignObject(b, i) || !json.Valid(b) {
		return nil, nil, 0, nil
	}
	var rawPay, rawHead, rawEnc []byte
	it := newObjectIter(b, i)
	for {
		name, v, ok := it.next()
		if !ok {
			break
		}
		switch string(name) {
		case "payload":
			rawPay = v
		case "headers":
			rawHead = v
		case "encoding":
			rawEnc = v
		default:
			return nil, nil, 0, nil // another member: the user's own object
		}
	}
	if rawPay == nil {
		return nil, nil, 0, nil
	}
	h := make(map[string]string)
	if rawHead != nil {
		if rawHead[0] != '{' {
			return nil, nil, 0, &EnvelopeError{offset(b, rawHead), "headers is not an object"}
		}
		if at, ok := decodeHeaderValues(rawHead, h); !ok {
			return nil, nil, 0, &EnvelopeError{offset(b, rawHead) + at, "a header value is not a string, number or boolean"}
		}
	}
	p, form, err := decodePayloadForm(rawPay, rawEnc)
	if err != nil {
		at := rawEnc
		if at == nil || err == errBadBase64 {
			at = rawPay
		}
		return nil, nil, 0, &EnvelopeError{offset(b, at), err.Error()}
	}
	return h, p, form, nil
}

// decodeHeaderValues adds the members of the object v to h: strings as their text, numbers and
// booleans as their JSON text (other producers write {"n": 5}); null leaves the header out. It
// reports false, and the offset of the value, for an object or array. Names and values are
// text: a raw byte that is not valid UTF-8 becomes U+FFFD (unquoteText), so the headers a
// handler sees are the ones every copy carries; two names that differ only there become one,
// the later member winning, as with any repeated name.
func decodeHeaderValues(v []byte, h map[string]string) (int, bool) {
	it := newObjectIter(v, 0)
	for {
		name, hv, ok := it.next()
		if !ok {
			return 0, true
		}
		switch hv[0] {
		case '"':
			h[headerName(name)] = unquoteText(hv)
		case 'n':
		case '{', '[':
			return offset(v, hv), false
		default: // a number, true, false
			h[headerName(name)] = string(hv)
		}
	}
}

// headerName is a decoded member name as text (see unquoteText).
func headerName(name []byte) string {
	if utf8.Valid(name) {
		return string(name)
	}
	return validText(string(name))
}

var (
	errBadEncoding = fmt.Errorf("%w: encoding is not \"base64\"", ErrMalformed)
	errBadBase64   = fmt.Errorf("%w: payload is not a base64 string", ErrMalformed)
)

// decodePayloadForm decodes a payload value and its optional encoding member.
func decodePayloadForm(v, enc []byte) ([]byte, engine.PayloadForm, error) {
	if enc != nil {
		if string(enc) != `"base64"` {
			return nil, 0, errBadEncoding
		}
		if v[0] != '"' {
			return nil, 0, errBadBase64
		}
		s := unquote(v)
		p := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
		n, err := base64.StdEncoding.Decode(p, s)
		if err != nil {
			return nil, 0, errBadBase64
		}
		return p[:n], engine.FormBase64, nil
	}
	if v[0] == '"' {
		return unquote(v), engine.FormString, nil
	}
	return appendCompact(make([]byte, 0, len(v)), v), engine.FormJSON, nil
}

// EncodeEnvelope returns what goes on a list or channel for m: an envelope
// {"headers":{...},"payload":...} when m has headers, else the bare payload bytes (m.Payload
// itself, not copied). One exception keeps payloads faithful: a header-less payload that would
// itself read back as an envelope is wrapped, or a reader would strip it. Inside an envelope the
// payload keeps every byte and the form it arrived in (appendPayloadForm).
func EncodeEnvelope(m *engine.Message) []byte {
	if len(m.Headers) == 0 {
		if i := skipSpace(m.Payload, 0); i >= len(m.Payload) || m.Payload[i] != '{' {
			return m.Payload
		}
		if h, _, _, err := decodeEnvelope(m.Payload); h == nil && err == nil {
			return m.Payload
		}
		dst := make([]byte, 0, len(m.Payload)+16)
		dst = append(dst, '{')
		dst = appendPayloadForm(dst, m.Payload, m.Form, true)
		return append(dst, '}')
	}
	dst := make([]byte, 0, len(m.Payload)+64)
	dst = append(dst, `{"headers":`...)
	dst = appendHeaders(dst, m.Headers)
	dst = append(dst, ',')
	dst = appendPayloadForm(dst, m.Payload, m.Form, true)
	return append(dst, '}')
}

// appendPayloadForm appends the member "payload":... (and "encoding":"base64" after it) so that
// it reads back as p's bytes in p's form (SPEC §3): bytes that are not valid UTF-8, or arrived
// as base64, as base64; a JSON string as a string ("true" stays a string); another JSON value as
// its text; bare bytes as JSON when they are valid JSON (other than a string literal) and, in an
// envelope (exact), already compact, so that they read back byte for byte, else as a string.
// Records write bare JSON compacted (exact false), as SPEC §3 says they do.
func appendPayloadForm(dst, p []byte, form engine.PayloadForm, exact bool) []byte {
	dst = append(dst, `"payload":`...)
	if form == engine.FormBase64 || !utf8.Valid(p) {
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, p)
		return append(dst, `","encoding":"base64"`...)
	}
	if form == engine.FormString {
		return appendQuoted(dst, p)
	}
	// FormJSON's text was compacted when read, so it is written raw; any other bytes given that
	// form (a hand-built message) are treated as bare bytes, which keeps them.
	if exact && !isCompactJSON(p) {
		return appendQuoted(dst, p)
	}
	return appendPayload(dst, p)
}

// isCompactJSON reports whether p is valid JSON other than a string literal, with no
// whitespace outside strings (so that reading it compacted gives p back).
func isCompactJSON(p []byte) bool {
	if len(p) == 0 || p[0] == '"' || !json.Valid(p) {
		return false
	}
	return len(appendCompact(nil, p)) == len(p)
}

// MalformedCount counts one source's malformed envelopes; Add reports the first, the one a
// source logs (SPEC §3: logged once per pipeline, counted always).
type MalformedCount struct{ n atomic.Int64 }

// Add counts one and reports whether it was the first.
func (c *MalformedCount) Add() bool { return c.n.Add(1) == 1 }

// Load is how many were counted.
func (c *MalformedCount) Load() int64 { return c.n.Load() }
