package redisstream

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// Fuzz targets for delay-queue members (SPEC §5; the stream entry fields they hold are codec's,
// fuzzed there). Their seed corpora under testdata/fuzz run with every `go test`;
// `go test -fuzz=FuzzDecodeDelayed ./transports/redisstream/` (and the other) searches further.
// No Redis is needed.

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
		delete(want, codec.StreamPayloadField)
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
