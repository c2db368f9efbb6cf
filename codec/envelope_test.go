package codec

import (
	"bytes"
	"maps"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

func TestDecodeEnvelope(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		headers map[string]string
		payload string
	}{
		{"payload only", `{"payload":"x"}`, map[string]string{}, "x"},
		{"headers and object payload", `{"headers":{"a":"b"},"payload":{"n": 1}}`, map[string]string{"a": "b"}, `{"n":1}`},
		{"number payload", ` {"payload" : 2 } `, map[string]string{}, "2"},
		{"escaped payload", `{"payload":"\"q\"\n"}`, map[string]string{}, "\"q\"\n"},
		{"empty headers", `{"headers":{},"payload":null}`, map[string]string{}, "null"},
		{"other member: bare", `{"payload":1,"x":2}`, map[string]string{}, `{"payload":1,"x":2}`},
		{"no payload: bare", `{"headers":{"a":"b"}}`, map[string]string{}, `{"headers":{"a":"b"}}`},
		{"number and boolean headers as their text", `{"payload":"x","headers":{"seq":"L7","n":5,"f":-1.5e3,"ok":true,"no":null}}`, map[string]string{"seq": "L7", "n": "5", "f": "-1.5e3", "ok": "true"}, "x"},
		{"header an object: bare", `{"headers":{"a":{}},"payload":1}`, map[string]string{}, `{"headers":{"a":{}},"payload":1}`},
		{"base64", `{"payload":"AP/+gAo=","encoding":"base64","headers":{"a":"b"}}`, map[string]string{"a": "b"}, "\x00\xff\xfe\x80\n"},
		{"bad base64: bare", `{"payload":"AP/+gAo","encoding":"base64"}`, map[string]string{}, `{"payload":"AP/+gAo","encoding":"base64"}`},
		{"headers null: bare", `{"headers":null,"payload":1}`, map[string]string{}, `{"headers":null,"payload":1}`},
		{"plain object: bare", `{"id":7}`, map[string]string{}, `{"id":7}`},
		{"empty object: bare", `{}`, map[string]string{}, `{}`},
		{"text: bare", `hello`, map[string]string{}, `hello`},
		{"array: bare", `[{"payload":1}]`, map[string]string{}, `[{"payload":1}]`},
		{"broken json: bare", `{"payload":`, map[string]string{}, `{"payload":`},
		{"empty: bare", ``, map[string]string{}, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, p := DecodeEnvelope([]byte(tt.in))
			if h == nil || !maps.Equal(h, tt.headers) {
				t.Errorf("headers = %#v, want %#v", h, tt.headers)
			}
			if string(p) != tt.payload {
				t.Errorf("payload = %q, want %q", p, tt.payload)
			}
		})
	}
}

func TestEncodeEnvelope(t *testing.T) {
	tests := []struct {
		name string
		m    engine.Message
		want string
	}{
		{"bare text", engine.Message{Payload: []byte("hello")}, "hello"},
		{"bare json kept as is", engine.Message{Payload: []byte(`{"id": 7}`)}, `{"id": 7}`},
		{"empty headers bare", engine.Message{Headers: map[string]string{}, Payload: []byte("x")}, "x"},
		{"headers text", engine.Message{Headers: map[string]string{"x-retry-count": "1"}, Payload: []byte("hello")}, `{"headers":{"x-retry-count":"1"},"payload":"hello"}`},
		{"headers json", engine.Message{Headers: map[string]string{"b": "2", "a": "1"}, Payload: []byte(`{"id": 7}`)}, `{"headers":{"a":"1","b":"2"},"payload":"{\"id\": 7}"}`}, // bytes kept: not compact, so a string
		{"headers compact json", engine.Message{Headers: map[string]string{"a": "1"}, Payload: []byte(`{"id":7}`)}, `{"headers":{"a":"1"},"payload":{"id":7}}`},
		{"headers not utf-8", engine.Message{Headers: map[string]string{"a": "1"}, Payload: []byte("\x00\xff\xfe\x80\n")}, `{"headers":{"a":"1"},"payload":"AP/+gAo=","encoding":"base64"}`},
		{"string form kept", engine.Message{Headers: map[string]string{"a": "1"}, Payload: []byte("true"), Form: engine.FormString}, `{"headers":{"a":"1"},"payload":"true"}`},
		{"json form kept", engine.Message{Headers: map[string]string{"a": "1"}, Payload: []byte("12345678901234567890"), Form: engine.FormJSON}, `{"headers":{"a":"1"},"payload":12345678901234567890}`},
		{"envelope-looking payload wrapped", engine.Message{Payload: []byte(`{"payload":1}`)}, `{"payload":{"payload":1}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EncodeEnvelope(&tt.m)
			if string(got) != tt.want {
				t.Fatalf("EncodeEnvelope = %s, want %s", got, tt.want)
			}
			h, p := DecodeEnvelope(got)
			wantH := tt.m.Headers
			if wantH == nil {
				wantH = map[string]string{}
			}
			if !maps.Equal(h, wantH) {
				t.Errorf("decoded headers = %v, want %v", h, wantH)
			}
			// JSON payloads come back compacted when they travel inside an envelope.
			if len(tt.m.Headers) == 0 && string(p) != string(tt.m.Payload) {
				t.Errorf("decoded payload = %q, want %q", p, tt.m.Payload)
			}
		})
	}
}

// A header name or value with raw bytes that are not UTF-8 (json.Valid lets them through) is
// read with U+FFFD for each such byte, the text every copy then carries: a copy and a copy of
// that copy are the same bytes (SPEC §3), and the handler sees what the copies carry.
func TestEnvelopeHeaderInvalidUTF8(t *testing.T) {
	in := "{\"payload\":\"\",\"headers\":{\"\x80\":0,\"a\":\"b\xff\xe2\x82\",\"ok\":\"\u00e9\"}}"
	var m engine.Message
	if err := DecodeEnvelopeInto([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"\ufffd": "0", "a": "b\ufffd\ufffd\ufffd", "ok": "\u00e9"}
	if !maps.Equal(m.Headers, want) {
		t.Fatalf("headers = %q, want %q", m.Headers, want)
	}
	enc := EncodeEnvelope(&m)
	var got engine.Message
	if err := DecodeEnvelopeInto(enc, &got); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Headers, want) {
		t.Fatalf("copy %q reads back as headers %q, want %q", enc, got.Headers, want)
	}
	if again := EncodeEnvelope(&got); !bytes.Equal(again, enc) {
		t.Fatalf("a copy of the copy differs:\n%q\n%q", enc, again)
	}
}

func BenchmarkDecodeEnvelope(b *testing.B) {
	el := []byte(`{"headers":{"source":"api","tenant":"acme","x-retry-count":"1"},"payload":{"id":12345,"amount":250.75}}`)
	b.ReportAllocs()
	var m engine.Message
	for b.Loop() {
		if err := DecodeEnvelopeInto(el, &m); err != nil {
			b.Fatal(err)
		}
	}
}
