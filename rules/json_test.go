package rules

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// stdJSON is what encoding/json writes with HTML escaping off: the reference for marshalJSON.
func stdJSON(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func TestMarshalJSONMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"nil", nil},
		{"bools", []any{true, false}},
		{"ints", []any{0, -1, 42, math.MaxInt64, int64(math.MinInt64)}},
		{"floats", []any{0.0, math.Copysign(0, -1), 0.1, 1.5, 20000.0, 1e20, 1e21, 123456789.125, 1e-6, 1e-7, 1.5e-9, -2.5e300, 5e-324}},
		{"plain string", "hello"},
		{"escapes", "quote\" backslash\\ nl\n cr\r tab\t bs\b ff\f nul\x00 us\x1f del\x7f"},
		{"html stays", "<a href='x'>&</a>"},
		{"unicode", "héllo, 世界 🎉"},
		{"separators", "a\u2028b\u2029c"},
		{"invalid utf-8", "bad\xff\xfeend\xe2\x82"},
		{"empty containers", []any{[]any{}, map[string]any{}}},
		{"map keys sorted", map[string]any{"b": 1, "a": []any{true, nil}, "": "empty", "é": 1.5, "A": "x\n"}},
		{"many keys", func() map[string]any {
			m := map[string]any{}
			for i := 0; i < 40; i++ {
				m[strings.Repeat("k", i%7)+string(rune('a'+i%26))+string(rune('0'+i%10))] = i
			}
			return m
		}()},
		{"nested", map[string]any{"id": 7.0, "items": []any{map[string]any{"sku": "a\"b", "qty": 2}}, "paid": true}},
		{"fallback duration", map[string]any{"d": time.Second}},
		{"fallback outcome", []any{engine.RetryAfter(time.Second)}},
		{"fallback typed map", map[string]string{"z": "1", "a": "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := marshalJSON(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if want := stdJSON(t, tt.v); string(got) != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestMarshalJSONRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	genString := func() string {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	}
	var gen func(depth int) any
	gen = func(depth int) any {
		switch n := r.IntN(8); {
		case n == 0:
			return nil
		case n == 1:
			return r.IntN(2) == 0
		case n == 2:
			return r.IntN(2000) - 1000
		case n == 3:
			return math.Float64frombits(r.Uint64()) // any bit pattern; NaN and Inf included
		case n == 4 || depth > 3:
			return genString()
		case n == 5 || n == 6:
			m := map[string]any{}
			for i := r.IntN(20); i > 0; i-- {
				m[genString()] = gen(depth + 1)
			}
			return m
		default:
			a := make([]any, r.IntN(5))
			for i := range a {
				a[i] = gen(depth + 1)
			}
			return a
		}
	}
	for i := 0; i < 3000; i++ {
		v := gen(0)
		got, err := marshalJSON(v)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		stdErr := enc.Encode(v)
		if (err != nil) != (stdErr != nil) {
			t.Fatalf("value %#v: error %v, encoding/json error %v", v, err, stdErr)
		}
		if err == nil && string(got) != strings.TrimSuffix(buf.String(), "\n") {
			t.Fatalf("value %#v:\ngot  %s\nwant %s", v, got, buf.String())
		}
	}
}

func TestHeaderString(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{nil, ""},
		{"s", "s"},
		{true, "true"},
		{12, "12"},
		{int64(-3), "-3"},
		{20000.0, "20000"},
		{1e20, "100000000000000000000"},
		{1e21, "1e+21"},
		{1e22, "1e+22"},
		{1.5, "1.5"},
		{0.1, "0.1"},
		{-0.0, "0"},
		{90 * time.Second, "1m30s"},
		{engine.Drop(), "drop"},
		{[]any{1, "a"}, `[1,"a"]`},
		{map[string]any{"b": 1, "a": 2}, `{"a":2,"b":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got, err := headerString(tt.v)
			if err != nil || got != tt.want {
				t.Errorf("headerString(%#v) = %q, %v; want %q", tt.v, got, err, tt.want)
			}
		})
	}
	if _, err := headerString(math.NaN()); err != nil {
		t.Errorf("NaN: %v", err)
	}
	if _, err := headerString([]any{math.Inf(1)}); err == nil {
		t.Error("[+Inf]: no error")
	}
}
