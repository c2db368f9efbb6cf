// Package codec holds flowrun's wire formats (SPEC §3), shared by the transports and by the
// engine's record emits.
//
// A record (stream files, pipes) is one JSON object per line:
//
//	{"key":"orders","headers":{"a":"b"},"payload":{"id":7}}
//
// A payload that is a JSON string is taken as its bytes; any other JSON value as its JSON text,
// compacted. Writing goes the other way round: a payload that is valid JSON is written raw
// (compacted), other bytes as a JSON string. One deliberate exception keeps bytes faithful: a
// payload that is itself a JSON string literal (the bytes `"hi"`, quotes included) is written as
// a string of those bytes, since writing it raw would read back as `hi` and a copy of a copy
// would drift. Invalid UTF-8 cannot travel in a JSON string: in a key or a header it becomes
// U+FFFD, on write and on read alike (a raw byte json.Valid let through), one for each byte, so a
// copy of a copy is the same line; a payload keeps its bytes (base64, appendPayloadForm).
//
// An envelope (list elements, Pub/Sub messages) is a JSON object whose only members are
// "payload" and optionally "headers" (an object of strings); anything else is a bare payload.
package codec

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/flowrun/flowrun/engine"
)

// ErrMalformed is wrapped by every error DecodeRecord returns.
var ErrMalformed = errors.New("malformed record")

var (
	errNotJSON    = fmt.Errorf("%w: not JSON", ErrMalformed)
	errNotObject  = fmt.Errorf("%w: not a JSON object", ErrMalformed)
	errNoKey      = fmt.Errorf("%w: key missing", ErrMalformed)
	errKeyType    = fmt.Errorf("%w: key is not a string", ErrMalformed)
	errHeaderType = fmt.Errorf("%w: headers are not an object of strings, numbers and booleans", ErrMalformed)
)

// DecodeRecord decodes one record line (without or with its trailing newline). The message's
// Key, Headers (never nil) and Payload are set and do not alias line; ID is left empty for the
// caller. Members other than key, headers and payload are ignored; a missing payload is empty;
// "headers": null counts as no headers.
func DecodeRecord(line []byte) (engine.Message, error) {
	var m engine.Message
	if !json.Valid(line) {
		return m, errNotJSON
	}
	i := skipSpace(line, 0)
	if line[i] != '{' {
		return m, errNotObject
	}
	haveKey := false
	var rawPay, rawEnc []byte
	it := newObjectIter(line, i)
	for {
		name, v, ok := it.next()
		if !ok {
			break
		}
		switch string(name) {
		case "key":
			if v[0] != '"' {
				return engine.Message{}, errKeyType
			}
			m.Key = unquoteText(v)
			haveKey = true
		case "headers":
			if v[0] == 'n' {
				continue
			}
			if v[0] != '{' {
				return engine.Message{}, errHeaderType
			}
			m.Headers = make(map[string]string)
			if _, ok := decodeHeaderValues(v, m.Headers); !ok {
				return engine.Message{}, errHeaderType
			}
		case "payload":
			rawPay = v
		case "encoding":
			rawEnc = v
		}
	}
	if !haveKey {
		return engine.Message{}, errNoKey
	}
	if rawPay != nil {
		p, form, err := decodePayloadForm(rawPay, rawEnc)
		if err != nil {
			return engine.Message{}, err
		}
		m.Payload, m.Form = p, form
	} else if rawEnc != nil {
		return engine.Message{}, errBadBase64
	}
	if m.Headers == nil {
		m.Headers = make(map[string]string)
	}
	return m, nil
}

// decodePayload turns a valid JSON value into payload bytes: a string's bytes, or the compact
// JSON text of anything else.
func decodePayload(v []byte) []byte {
	if v[0] == '"' {
		return unquote(v)
	}
	return appendCompact(make([]byte, 0, len(v)), v)
}

// AppendRecord appends m as one record line, newline included. Headers are written in sorted
// order, and left out when empty; m.ID is not written.
func AppendRecord(dst []byte, m *engine.Message) []byte {
	dst = append(dst, `{"key":`...)
	dst = appendQuotedString(dst, m.Key)
	if len(m.Headers) > 0 {
		dst = append(dst, `,"headers":`...)
		dst = appendHeaders(dst, m.Headers)
	}
	dst = append(dst, ',')
	dst = appendPayloadForm(dst, m.Payload, m.Form, false)
	return append(dst, '}', '\n')
}

func appendHeaders(dst []byte, h map[string]string) []byte {
	var arr [16]string
	keys := arr[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendQuotedString(dst, k)
		dst = append(dst, ':')
		dst = appendQuotedString(dst, h[k])
	}
	return append(dst, '}')
}

// appendPayload writes p raw when it is valid JSON (other than a string literal, see the
// package doc), compacted, and as a JSON string otherwise.
func appendPayload(dst, p []byte) []byte {
	if i := skipSpace(p, 0); i < len(p) && p[i] != '"' && json.Valid(p) {
		return appendCompact(dst, p)
	}
	return appendQuoted(dst, p)
}
