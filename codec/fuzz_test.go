package codec

import (
	"bytes"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/flowrun/flowrun/engine"
)

// Fuzz targets for the wire formats of SPEC §3. Their seed corpora under testdata/fuzz run with
// every `go test`; `go test -fuzz=FuzzDecodeRecord ./codec/` (and the others) searches further.
//
// The properties: decoding never panics and never returns nil headers; what decodes, encodes
// and decodes again to the same message; and a message encodes and decodes back to itself,
// where SPEC §3 says it does: text that is valid UTF-8, with a payload that is valid JSON
// coming back compacted.

// fuzzHeaders builds headers from "name\x00value\x00name\x00value..." (an odd tail is a name
// with an empty value).
func fuzzHeaders(s string) map[string]string {
	h := map[string]string{}
	if s == "" {
		return h
	}
	parts := strings.Split(s, "\x00")
	for i := 0; i < len(parts); i += 2 {
		v := ""
		if i+1 < len(parts) {
			v = parts[i+1]
		}
		h[parts[i]] = v
	}
	return h
}

// wirePayload is what p reads back as after being written (SPEC §3): a payload that is valid
// JSON other than a string literal is written raw, compacted; other bytes as a string.
func wirePayload(p []byte) []byte {
	if i := skipSpace(p, 0); i < len(p) && p[i] != '"' && json.Valid(p) {
		var b bytes.Buffer
		if err := json.Compact(&b, p); err == nil {
			return b.Bytes()
		}
	}
	return p
}

// faithful reports whether m's text can travel in JSON unchanged (valid UTF-8 everywhere).
func faithful(m *engine.Message) bool {
	if !utf8.ValidString(m.Key) || !utf8.Valid(m.Payload) {
		return false
	}
	for k, v := range m.Headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

func sameMessage(t *testing.T, what string, got, want engine.Message) {
	t.Helper()
	if got.Key != want.Key || !bytes.Equal(got.Payload, want.Payload) || !maps.Equal(got.Headers, want.Headers) {
		t.Fatalf("%s:\n got key %q headers %q payload %q\nwant key %q headers %q payload %q",
			what, got.Key, got.Headers, got.Payload, want.Key, want.Headers, want.Payload)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := DecodeRecord(line)
		if err != nil {
			return
		}
		if m.Headers == nil {
			t.Fatal("decoded record with nil headers")
		}
		// Once through the writer, the message is stable: it re-encodes to the same line.
		enc := AppendRecord(nil, &m)
		m2, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("re-encoded record %q does not decode: %v", enc, err)
		}
		if faithful(&m) {
			sameMessage(t, "decode, encode, decode", m2, engine.Message{Key: m.Key, Headers: m.Headers, Payload: wirePayload(m.Payload)})
		}
		enc2 := AppendRecord(nil, &m2)
		m3, err := DecodeRecord(enc2)
		if err != nil {
			t.Fatalf("re-encoded record %q does not decode: %v", enc2, err)
		}
		sameMessage(t, "second round trip", m3, m2)
		if !bytes.Equal(enc2, AppendRecord(nil, &m3)) {
			t.Fatalf("encoding is not stable: %q then %q", enc2, AppendRecord(nil, &m3))
		}
	})
}

func FuzzEncodeRecord(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, headers string, payload []byte) {
		m := engine.Message{Key: key, Headers: fuzzHeaders(headers), Payload: payload}
		line := AppendRecord(nil, &m)
		if n := bytes.IndexByte(line, '\n'); n != len(line)-1 {
			t.Fatalf("record %q is not one line", line)
		}
		got, err := DecodeRecord(line)
		if err != nil {
			t.Fatalf("record %q does not decode: %v", line, err)
		}
		if faithful(&m) {
			sameMessage(t, "encode, decode", got, engine.Message{Key: key, Headers: m.Headers, Payload: wirePayload(payload)})
		}
	})
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p := DecodeEnvelope(b)
		if h == nil {
			t.Fatal("nil headers")
		}
		if _, _, ok := decodeEnvelope(b); !ok {
			if len(h) != 0 || !bytes.Equal(p, b) {
				t.Fatalf("bare payload %q decoded as headers %q payload %q", b, h, p)
			}
		}
		// What decodes re-encodes to something that decodes to the same message, or (text
		// that was not valid UTF-8) to a stable one.
		m := engine.Message{Headers: h, Payload: p}
		h2, p2 := DecodeEnvelope(EncodeEnvelope(&m))
		m2 := engine.Message{Headers: h2, Payload: p2}
		if faithful(&m) {
			want := p
			if len(h) > 0 {
				want = wirePayload(p)
			}
			sameMessage(t, "decode, encode, decode", m2, engine.Message{Headers: h, Payload: want})
		}
		h3, p3 := DecodeEnvelope(EncodeEnvelope(&m2))
		sameMessage(t, "second round trip", engine.Message{Headers: h3, Payload: p3}, m2)
	})
}

func FuzzEncodeEnvelope(f *testing.F) {
	f.Fuzz(func(t *testing.T, headers string, payload []byte) {
		m := engine.Message{Headers: fuzzHeaders(headers), Payload: payload}
		h, p := DecodeEnvelope(EncodeEnvelope(&m))
		want := payload
		if len(m.Headers) > 0 {
			if !faithful(&m) {
				return
			}
			want = wirePayload(payload)
		} else if _, _, ok := decodeEnvelope(payload); ok {
			// Wrapped so that it is not read as an envelope: it comes back as JSON does.
			want = wirePayload(payload)
		}
		// A header-less payload travels bare: byte for byte, whatever the bytes.
		sameMessage(t, "encode, decode", engine.Message{Headers: h, Payload: p}, engine.Message{Headers: m.Headers, Payload: want})
	})
}
