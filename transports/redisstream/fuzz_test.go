package redisstream

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

// Fuzz targets for stream entries and delay-queue members (SPEC §3, §5). Their seed corpora under
// testdata/fuzz run with every `go test`; `go test -fuzz=FuzzFields ./transports/redisstream/`
// (and the others) searches further. No Redis is needed.

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

func fuzzHeaders(s string) map[string]string {
	h := map[string]string{}
	p := fuzzPairs(s)
	for i := 0; i < len(p); i += 2 {
		h[p[i]] = p[i+1]
	}
	return h
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
func FuzzFields(f *testing.F) {
	f.Fuzz(func(t *testing.T, headers string, payload []byte) {
		m := &engine.Message{Headers: fuzzHeaders(headers), Payload: payload}
		fields := Fields(m)
		if len(fields) == 0 || len(fields)%2 != 0 {
			t.Fatalf("Fields = %q: XADD needs a non-empty, even list", fields)
		}
		var got engine.Message
		messageFrom(&got, entryValues(fields))
		want := maps.Clone(m.Headers)
		delete(want, PayloadField)
		if !maps.Equal(got.Headers, want) || !bytes.Equal(got.Payload, payload) {
			t.Fatalf("fields %q read back as headers %q payload %q; want %q and %q",
				fields, got.Headers, got.Payload, want, payload)
		}
		if again := Fields(&got); !slices.Equal(again, fields) {
			t.Fatalf("fields not stable: %q, then %q", fields, again)
		}
	})
}

// An entry from any producer reads as a message that writes back as the same fields, but for
// an empty payload field beside other fields, which a copy leaves out (Fields' doc).
func FuzzEntryFields(f *testing.F) {
	f.Fuzz(func(t *testing.T, fields string) {
		values := entryValues(fuzzPairs(fields))
		if len(values) == 0 {
			return // XADD needs a field
		}
		var m engine.Message
		messageFrom(&m, values)
		got := entryValues(Fields(&m))
		want := maps.Clone(values)
		if p, ok := want[PayloadField]; ok && p == "" && len(want) > 1 {
			delete(want, PayloadField)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("entry %q wrote back as %q", values, got)
		}
	})
}

// DecodeDelayed never panics; what it accepts re-encodes to a member that decodes the same.
func FuzzDecodeDelayed(f *testing.F) {
	f.Fuzz(func(t *testing.T, member string) {
		d, err := DecodeDelayed(member)
		if err != nil {
			return
		}
		if d.Message == nil || d.Message.Headers == nil {
			t.Fatalf("decoded %q without a message or headers", member)
		}
		d2, err := DecodeDelayed(encodeDelayed(d.Key, d.OriginalID, d.Message))
		if err != nil {
			t.Fatalf("re-encoded member of %q does not decode: %v", member, err)
		}
		sameDelayed(t, d2, d.Key, d.OriginalID, d.Message.Headers, d.Message.Payload)
	})
}

// A delayed copy survives the member format byte for byte: key, original id, headers (but one
// named "payload") and payload, whatever the bytes.
func FuzzDelayedRoundTrip(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, id, headers string, payload []byte) {
		m := &engine.Message{Headers: fuzzHeaders(headers), Payload: payload}
		member := encodeDelayed(key, id, m)
		d, err := DecodeDelayed(member)
		if err != nil {
			t.Fatalf("member %q does not decode: %v", member, err)
		}
		want := maps.Clone(m.Headers)
		delete(want, PayloadField)
		sameDelayed(t, d, key, id, want, payload)
	})
}

func sameDelayed(t *testing.T, d Delayed, key, id string, headers map[string]string, payload []byte) {
	t.Helper()
	if d.Key != key || d.OriginalID != id || d.Message.Key != key ||
		!maps.Equal(d.Message.Headers, headers) || !bytes.Equal(d.Message.Payload, payload) {
		t.Fatalf("decoded key %q id %q headers %q payload %q; want %q %q %q %q",
			d.Key, d.OriginalID, d.Message.Headers, d.Message.Payload, key, id, headers, payload)
	}
}
