package codec

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

func TestStreamFields(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		payload string
		want    []string
	}{
		{"headers then payload", map[string]string{"x-retry-count": "1"}, "a", []string{"x-retry-count", "1", "payload", "a"}},
		{"headers in name order", map[string]string{"x-original-key": "s.dl", "h": "v", "x-attempts": "1", "x-dead-letter-reason": "bad"}, "body",
			[]string{"h", "v", "x-attempts", "1", "x-dead-letter-reason", "bad", "x-original-key", "s.dl", "payload", "body"}},
		// Another producer's entry (SPEC §3) keeps its shape: no payload field is added.
		{"headers without payload", map[string]string{"k": "v"}, "", []string{"k", "v"}},
		// XADD needs a field.
		{"nothing", map[string]string{}, "", []string{"payload", ""}},
		{"payload only", nil, "p", []string{"payload", "p"}},
		{"a header named payload is shadowed", map[string]string{"payload": "h", "a": "b"}, "p", []string{"a", "b", "payload", "p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StreamFields(&engine.Message{Headers: tt.headers, Payload: []byte(tt.payload)})
			if !slices.Equal(got, tt.want) {
				t.Fatalf("StreamFields = %q, want %q", got, tt.want)
			}
			var args []string
			for _, a := range AppendStreamArgs(nil, &engine.Message{Headers: tt.headers, Payload: []byte(tt.payload)}) {
				switch a := a.(type) {
				case string:
					args = append(args, a)
				case []byte:
					args = append(args, string(a))
				}
			}
			if !slices.Equal(args, tt.want) {
				t.Fatalf("AppendStreamArgs = %q, want %q", args, tt.want)
			}
		})
	}
}

func TestDecodeStream(t *testing.T) {
	tests := []struct {
		name    string
		values  map[string]any
		headers map[string]string
		payload string
	}{
		{"payload and headers", map[string]any{"payload": `{"amount":5}`, "tenant": "a"}, map[string]string{"tenant": "a"}, `{"amount":5}`},
		{"another producer", map[string]any{"id": "7", "amount": "12"}, map[string]string{"id": "7", "amount": "12"}, ""},
		{"payload only", map[string]any{"payload": "x"}, map[string]string{}, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m engine.Message
			DecodeStream(&m, tt.values)
			if m.Headers == nil || !maps.Equal(m.Headers, tt.headers) || string(m.Payload) != tt.payload {
				t.Fatalf("headers %v payload %q, want %v %q", m.Headers, m.Payload, tt.headers, tt.payload)
			}
		})
	}
}

// fuzzPairs splits "a\x00b\x00c\x00d" into ["a" "b" "c" "d"], padding an odd tail with "".
func fuzzPairs(s string) []string {
	if s == "" {
		return nil
	}
	p := strings.Split(s, "\x00")
	if len(p)%2 != 0 {
		p = append(p, "")
	}
	return p
}

// entryValues is what XRANGE would return for an XADD of fields: the last value of a field wins.
func entryValues(fields []string) map[string]any {
	v := make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		v[fields[i]] = fields[i+1]
	}
	return v
}

// A message written as entry fields reads back as itself: every header but one named
// "payload" (the payload shadows it), and the payload byte for byte.
func FuzzStreamFields(f *testing.F) {
	f.Fuzz(func(t *testing.T, headers string, payload []byte) {
		m := &engine.Message{Headers: fuzzHeaders(headers), Payload: payload}
		fields := StreamFields(m)
		if len(fields) == 0 || len(fields)%2 != 0 {
			t.Fatalf("StreamFields = %q: XADD needs a non-empty, even list", fields)
		}
		var got engine.Message
		DecodeStream(&got, entryValues(fields))
		want := maps.Clone(m.Headers)
		delete(want, StreamPayloadField)
		if !maps.Equal(got.Headers, want) || !bytes.Equal(got.Payload, payload) {
			t.Fatalf("fields %q read back as headers %q payload %q; want %q and %q",
				fields, got.Headers, got.Payload, want, payload)
		}
		if again := StreamFields(&got); !slices.Equal(again, fields) {
			t.Fatalf("fields not stable: %q, then %q", fields, again)
		}
	})
}

// An entry from any producer reads as a message that writes back as the same fields, but for
// an empty payload field beside other fields, which a copy leaves out (StreamFields' doc).
func FuzzStreamEntry(f *testing.F) {
	f.Fuzz(func(t *testing.T, fields string) {
		values := entryValues(fuzzPairs(fields))
		if len(values) == 0 {
			return // XADD needs a field
		}
		var m engine.Message
		DecodeStream(&m, values)
		got := entryValues(StreamFields(&m))
		want := maps.Clone(values)
		if p, ok := want[StreamPayloadField]; ok && p == "" && len(want) > 1 {
			delete(want, StreamPayloadField)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("entry %q wrote back as %q", values, got)
		}
	})
}
