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
		if !utf8.ValidString(m.Key) || !faithfulHeaders(m.Headers) {
			t.Fatalf("%q read with key %q headers %q: raw bytes that are not UTF-8 become U+FFFD at first read", line, m.Key, m.Headers)
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
		var m engine.Message
		err := DecodeEnvelopeInto(b, &m)
		if m.Headers == nil {
			t.Fatal("nil headers")
		}
		if !faithfulHeaders(m.Headers) {
			t.Fatalf("%q read with headers %q: raw bytes that are not UTF-8 become U+FFFD at first read", b, m.Headers)
		}
		if h, _, _, _ := decodeEnvelope(b); h == nil {
			if len(m.Headers) != 0 || !bytes.Equal(m.Payload, b) || m.Form != engine.FormBare {
				t.Fatalf("bare payload %q (err %v) decoded as headers %q payload %q form %d", b, err, m.Headers, m.Payload, m.Form)
			}
		}
		copyKeepsBytes(t, &m)
	})
}

// FuzzForeignObject: an object foreignObject lets skip validation is one the full path reads as
// bare too: not valid JSON, or valid with a first member that is not an envelope's.
func FuzzForeignObject(f *testing.F) {
	for _, s := range []string{`{"id":1}`, `{"id":`, `{"payload":1}`, `{"pay\u006coad":1}`, `{"":1}`, `{"`, ` { "x" : [}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		i := skipSpace(b, 0)
		if i >= len(b) || b[i] != '{' || !foreignObject(b, i) || !json.Valid(b) {
			return
		}
		it := newObjectIter(b, i)
		name, _, ok := it.next()
		if ok && (string(name) == "payload" || string(name) == "headers" || string(name) == "encoding") {
			t.Fatalf("%q starts with envelope member %q, yet was taken for the user's own object", b, name)
		}
	})
}

// copyKeepsBytes is the property of SPEC §3 for lists and Pub/Sub: a message read from the wire,
// written as a copy (a retry copy adds x-retry-count), and read again has every payload byte and
// header, and its form; and a copy of that copy is written byte for byte the same.
func copyKeepsBytes(t *testing.T, m *engine.Message) {
	t.Helper()
	c := m.Clone()
	c.Headers[engine.HeaderRetryCount] = "1"
	enc := EncodeEnvelope(c)
	var got engine.Message
	if err := DecodeEnvelopeInto(enc, &got); err != nil {
		t.Fatalf("copy %q does not read back: %v", enc, err)
	}
	wantH := c.Headers
	if !faithfulHeaders(c.Headers) {
		// Header text that is not UTF-8 cannot travel in JSON; only a message built in Go has
		// it, since one read from the wire has U+FFFD in its place already.
		wantH = got.Headers
	}
	sameMessage(t, "read, copy, read", got, engine.Message{Headers: wantH, Payload: c.Payload})
	if c.Form != engine.FormBare && got.Form != c.Form && utf8.Valid(c.Payload) {
		t.Fatalf("copy of a payload of form %d read back as form %d (%q)", c.Form, got.Form, enc)
	}
	if again := EncodeEnvelope(&got); !bytes.Equal(again, enc) {
		t.Fatalf("a copy of the copy differs:\n%q\n%q", enc, again)
	}
}

func faithfulHeaders(h map[string]string) bool {
	for k, v := range h {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

// FuzzEncodeEnvelope: any payload, in any form, with or without headers, reads back as the same
// bytes (SPEC §3: base64 for bytes that are not UTF-8), and copies keep them.
func FuzzEncodeEnvelope(f *testing.F) {
	f.Fuzz(func(t *testing.T, headers string, payload []byte) {
		for form := engine.FormBare; form <= engine.FormBase64; form++ {
			m := engine.Message{Headers: fuzzHeaders(headers), Payload: payload, Form: form}
			var got engine.Message
			if err := DecodeEnvelopeInto(EncodeEnvelope(&m), &got); err != nil {
				t.Fatalf("form %d: %q does not read back: %v", form, EncodeEnvelope(&m), err)
			}
			wantH := m.Headers
			if !faithfulHeaders(m.Headers) {
				wantH = got.Headers
			}
			sameMessage(t, "encode, decode", got, engine.Message{Headers: wantH, Payload: payload})
			copyKeepsBytes(t, &got)
		}
	})
}
