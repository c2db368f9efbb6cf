package codec

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

func TestDecodeRecord(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		key     string
		headers map[string]string
		payload string
	}{
		{"string payload", `{"key":"orders","payload":"hello"}`, "orders", map[string]string{}, "hello"},
		{"escaped string payload", `{"key":"k","payload":"a\"b\\c\/\n\t\u00e9\ud83d\ude00"}`, "k", map[string]string{}, "a\"b\\c/\n\té😀"},
		{"lone surrogate", `{"key":"k","payload":"x\ud800y"}`, "k", map[string]string{}, "x\uFFFDy"},
		{"object payload compacted", `{"key":"k","payload": {"a": 1, "b": [1, 2], "s": "x y"} }`, "k", map[string]string{}, `{"a":1,"b":[1,2],"s":"x y"}`},
		{"number as written", `{"key":"k","payload":12.50}`, "k", map[string]string{}, "12.50"},
		{"array", `{"key":"k","payload":[1,"a"]}`, "k", map[string]string{}, `[1,"a"]`},
		{"bool", `{"key":"k","payload":true}`, "k", map[string]string{}, "true"},
		{"null", `{"key":"k","payload":null}`, "k", map[string]string{}, "null"},
		{"payload missing", `{"key":"k"}`, "k", map[string]string{}, ""},
		{"headers", `{"key":"k","headers":{"a":"1","x-retry-count":"2"},"payload":"p"}`, "k", map[string]string{"a": "1", "x-retry-count": "2"}, "p"},
		{"headers null", `{"key":"k","headers":null,"payload":"p"}`, "k", map[string]string{}, "p"},
		{"headers empty", `{"key":"k","headers":{},"payload":"p"}`, "k", map[string]string{}, "p"},
		{"any member order", `{"payload":{"id":7},"headers":{"h":"v"},"key":"orders"}`, "orders", map[string]string{"h": "v"}, `{"id":7}`},
		{"unknown members ignored", `{"key":"k","id":"3","extra":{"a":[1]},"payload":"p"}`, "k", map[string]string{}, "p"},
		{"escaped member name", `{"k\u0065y":"x","payload":"p"}`, "x", map[string]string{}, "p"},
		{"escaped key value", `{"key":"a\"b","payload":""}`, "a\"b", map[string]string{}, ""},
		{"surrounding whitespace and CR", " {\"key\" : \"k\" , \"payload\" : \"p\" }\r\n", "k", map[string]string{}, "p"},
		{"unicode raw", `{"key":"ключ","payload":"значение"}`, "ключ", map[string]string{}, "значение"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeRecord([]byte(tt.line))
			if err != nil {
				t.Fatalf("DecodeRecord: %v", err)
			}
			if m.Key != tt.key {
				t.Errorf("key = %q, want %q", m.Key, tt.key)
			}
			if m.Headers == nil || !maps.Equal(m.Headers, tt.headers) {
				t.Errorf("headers = %#v, want %#v", m.Headers, tt.headers)
			}
			if string(m.Payload) != tt.payload {
				t.Errorf("payload = %q, want %q", m.Payload, tt.payload)
			}
			if m.ID != "" {
				t.Errorf("id = %q, want empty", m.ID)
			}
		})
	}
}

func TestDecodeRecordMalformed(t *testing.T) {
	tests := []struct {
		name, line string
		want       error
	}{
		{"empty", ``, errNotJSON},
		{"text", `hello`, errNotJSON},
		{"truncated", `{"key":"k","payload":{"a":1}`, errNotJSON},
		{"two objects", `{"key":"a"}{"key":"b"}`, errNotJSON},
		{"trailing junk", `{"key":"a"} x`, errNotJSON},
		{"array", `[{"key":"a"}]`, errNotObject},
		{"string", `"key"`, errNotObject},
		{"number", `12`, errNotObject},
		{"empty object", `{}`, errNoKey},
		{"no key", `{"payload":"p"}`, errNoKey},
		{"key number", `{"key":1}`, errKeyType},
		{"key null", `{"key":null}`, errKeyType},
		{"headers array", `{"key":"a","headers":["x"]}`, errHeaderType},
		{"headers string", `{"key":"a","headers":"x"}`, errHeaderType},
		{"header value object", `{"key":"a","headers":{"x":{"y":1}}}`, errHeaderType},
		{"header value array", `{"key":"a","headers":{"x":[1]}}`, errHeaderType},
		{"encoding not base64", `{"key":"a","payload":"eA==","encoding":"hex"}`, errBadEncoding},
		{"base64 not a string", `{"key":"a","payload":1,"encoding":"base64"}`, errBadBase64},
		{"base64 broken", `{"key":"a","payload":"e!==","encoding":"base64"}`, errBadBase64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRecord([]byte(tt.line))
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestAppendRecord(t *testing.T) {
	tests := []struct {
		name string
		m    engine.Message
		want string
	}{
		{"json object compacted", engine.Message{Key: "orders", Payload: []byte("{\"id\": 7,\n \"s\": \"a b\"}")}, `{"key":"orders","payload":{"id":7,"s":"a b"}}`},
		{"json number", engine.Message{Key: "k", Payload: []byte("12.50")}, `{"key":"k","payload":12.50}`},
		{"json array", engine.Message{Key: "k", Payload: []byte(`[1, true, null]`)}, `{"key":"k","payload":[1,true,null]}`},
		{"json null", engine.Message{Key: "k", Payload: []byte(`null`)}, `{"key":"k","payload":null}`},
		{"text", engine.Message{Key: "k", Payload: []byte("hello world")}, `{"key":"k","payload":"hello world"}`},
		{"empty", engine.Message{Key: "k"}, `{"key":"k","payload":""}`},
		{"json string literal kept as bytes", engine.Message{Key: "k", Payload: []byte(`"hi"`)}, `{"key":"k","payload":"\"hi\""}`},
		{"invalid json", engine.Message{Key: "k", Payload: []byte(`{"a":`)}, `{"key":"k","payload":"{\"a\":"}`},
		{"control bytes", engine.Message{Key: "k", Payload: []byte("a\nb\r\t\x00\x1f\"\\")}, `{"key":"k","payload":"a\nb\r\t\u0000\u001f\"\\"}`},
		{"backspace and form feed long", engine.Message{Key: "k", Payload: []byte("a\b\fb")}, `{"key":"k","payload":"a\u0008\u000cb"}`},
		{"invalid utf-8", engine.Message{Key: "k", Payload: []byte("a\xffb")}, `{"key":"k","payload":"Yf9i","encoding":"base64"}`},
		{"line separators", engine.Message{Key: "k", Payload: []byte("a\u2028b\u2029")}, `{"key":"k","payload":"a\u2028b\u2029"}`},
		{"utf-8", engine.Message{Key: "k", Payload: []byte("é😀")}, `{"key":"k","payload":"é😀"}`},
		{"headers sorted", engine.Message{Key: "k", Headers: map[string]string{"z": "1", "a": "2", "m\"": "x\ny"}, Payload: []byte(`1`)}, `{"key":"k","headers":{"a":"2","m\"":"x\ny","z":"1"},"payload":1}`},
		{"empty headers left out", engine.Message{Key: "k", Headers: map[string]string{}, Payload: []byte(`1`)}, `{"key":"k","payload":1}`},
		{"key escaped", engine.Message{Key: "a\"b", Payload: []byte(`1`)}, `{"key":"a\"b","payload":1}`},
		{"id not written", engine.Message{Key: "k", ID: "12", Payload: []byte(`1`)}, `{"key":"k","payload":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendRecord([]byte("prefix"), &tt.m))
			if got != "prefix"+tt.want+"\n" {
				t.Fatalf("AppendRecord =\n%s\nwant\n%s", got, "prefix"+tt.want+"\n")
			}
			if !json.Valid([]byte(tt.want)) {
				t.Fatalf("not valid JSON: %s", tt.want)
			}
		})
	}
}

// Every payload survives a write and a read, except the documented losses (whitespace of JSON,
// invalid UTF-8), so a copy of a copy never drifts.
func TestRecordRoundTrip(t *testing.T) {
	payloads := []string{
		"", "hello", `"hi"`, `"`, `{"a":1}`, `[1,2]`, `12.50`, `-0`, `null`, `true`, "a\nb",
		`{"nested":{"s":"x\"y","u":"\u00e9"}}`, "\x00\x01", "é😀", `{"payload":1}`, " ",
	}
	for _, p := range payloads {
		t.Run(p, func(t *testing.T) {
			in := engine.Message{Key: "k", Headers: map[string]string{"x-retry-count": "1", "h": "a\tb"}, Payload: []byte(p)}
			line := AppendRecord(nil, &in)
			out, err := DecodeRecord(line)
			if err != nil {
				t.Fatalf("DecodeRecord(%s): %v", line, err)
			}
			if string(out.Payload) != p || out.Key != in.Key || !maps.Equal(out.Headers, in.Headers) {
				t.Fatalf("round trip of %q gave %+v (line %s)", p, out, line)
			}
			again := AppendRecord(nil, &out)
			if string(again) != string(line) {
				t.Fatalf("second write differs:\n%s\n%s", line, again)
			}
		})
	}
}

// DecodeRecord agrees with encoding/json on what the line says.
func TestDecodeRecordAgreesWithEncodingJSON(t *testing.T) {
	lines := []string{
		`{"key":"k","headers":{"a\u0041":"\u00e9\n","b":""},"payload":"x\\y\u2028"}`,
		`{"key":"\ud83d\ude00","payload":"\/"}`,
		"{\"key\":\"k\x80\",\"headers\":{\"\xff\xfe\":\"v\x80\xe2\x82\"},\"payload\":\"x\"}", // each raw invalid byte is U+FFFD
	}
	for _, l := range lines {
		var ref struct {
			Key     string
			Headers map[string]string
			Payload string
		}
		if err := json.Unmarshal([]byte(l), &ref); err != nil {
			t.Fatal(err)
		}
		m, err := DecodeRecord([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if m.Key != ref.Key || string(m.Payload) != ref.Payload || !maps.Equal(m.Headers, ref.Headers) {
			t.Errorf("%s: got %+v, encoding/json %+v", l, m, ref)
		}
	}
}

func TestDecodeRecordDoesNotAlias(t *testing.T) {
	line := []byte(`{"key":"k","headers":{"h":"v"},"payload":"abc"}`)
	m, err := DecodeRecord(line)
	if err != nil {
		t.Fatal(err)
	}
	for i := range line {
		line[i] = 'X'
	}
	if m.Key != "k" || m.Headers["h"] != "v" || string(m.Payload) != "abc" {
		t.Fatalf("message changed with its line: %+v", m)
	}
}

var benchLine = []byte(`{"key":"payouts","headers":{"x-retry-count":"1","source":"api"},"payload":{"id":12345,"amount":250.75,"currency":"EUR","note":"monthly payout"}}`)

func BenchmarkDecodeRecord(b *testing.B) {
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRecord(benchLine); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendRecord(b *testing.B) {
	m, err := DecodeRecord(benchLine)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 512)
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRecord(buf[:0], &m)
	}
}

// The reference point for the two benchmarks above.
func BenchmarkDecodeRecordEncodingJSON(b *testing.B) {
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	for b.Loop() {
		var r struct {
			Key     string            `json:"key"`
			Headers map[string]string `json:"headers"`
			Payload json.RawMessage   `json:"payload"`
		}
		if err := json.Unmarshal(benchLine, &r); err != nil {
			b.Fatal(err)
		}
	}
}
