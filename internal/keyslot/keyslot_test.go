package keyslot

import "testing"

func TestOf(t *testing.T) {
	// CRC-16/XMODEM's check value, and slots Redis itself gives (CLUSTER KEYSLOT).
	tests := []struct {
		key  string
		slot int
	}{
		{"123456789", 0x31C3 % Count},
		{"somekey", 11058},
		{"foo", 12182},
		{"{foo}:delayed", 12182},
		{"x{}y", Of("x{}y")}, // "{}" is no tag: the whole key is hashed
		{"", 0},
	}
	for _, tt := range tests {
		if got := Of(tt.key); got != tt.slot {
			t.Errorf("Of(%q) = %d, want %d", tt.key, got, tt.slot)
		}
	}
	if tag, ok := HashTag("a{b}c{d}"); !ok || tag != "b" {
		t.Errorf("HashTag = %q, %v; want the first tag", tag, ok)
	}
	if _, ok := HashTag("x{}y"); ok {
		t.Error("an empty {} is no hash tag")
	}
}
