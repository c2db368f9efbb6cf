package codec

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// stdString is what encoding/json writes for s with HTML escaping off (a string always encodes).
func stdString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func TestAppendJSONString(t *testing.T) {
	tests := []struct {
		name, s, want string
	}{
		{"plain", "hello", `"hello"`},
		{"empty", "", `""`},
		{"escapes", "q\" b\\ nl\n cr\r tab\t bs\b ff\f nul\x00 us\x1f del\x7f", `"q\" b\\ nl\n cr\r tab\t bs\b ff\f nul\u0000 us\u001f del` + "\x7f" + `"`},
		{"html stays", "<a href='x'>&</a>", `"<a href='x'>&</a>"`},
		{"unicode", "héllo, 世界 🎉", `"héllo, 世界 🎉"`},
		{"separators", "a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"invalid utf-8", "bad\xff\xfeend\xe2\x82", `"bad\ufffd\ufffdend\ufffd\ufffd"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendJSONString([]byte("x"), tt.s))
			if got != "x"+tt.want {
				t.Errorf("AppendJSONString(%q) = %s, want %s", tt.s, got, "x"+tt.want)
			}
			if std := stdString(tt.s); tt.want != std {
				t.Errorf("want %s differs from encoding/json's %s", tt.want, std)
			}
		})
	}
}

func TestAppendJSONStringRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		b := make([]byte, r.IntN(16))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		if got, want := string(AppendJSONString(nil, string(b))), stdString(string(b)); got != want {
			t.Fatalf("AppendJSONString(%q) = %s, want %s", b, got, want)
		}
	}
}
