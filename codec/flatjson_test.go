package codec

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeFlat: whatever decodeFlat accepts, json.Unmarshal into an any decodes to the same.
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"amount":37.5,"currency":"USD","customer":"c01"}`,
		` { "a" : true , "b":false,"c":null, "d":-0.5e+3, "é":"ü" } `, `{}`, `{"a":1,"a":2}`,
		`{"a":01}`, `{"a":1.}`, `{"a":1e400}`, `{"a":"\u00e9"}`, `{"a":{"b":1}}`, `{"a":[1]}`,
		`{"a":1,}`, `{"a":1}x`, `{"a":"` + "\xff" + `"}`, `{"a":-}`, `{"a":tru}`, `[1]`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := DecodeFlat(b)
		if !ok {
			return
		}
		var want any
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("DecodeFlat(%q) accepted what json.Unmarshal refuses: %v", b, err)
		}
		if !reflect.DeepEqual(any(got), want) {
			t.Fatalf("DecodeFlat(%q) = %#v, json.Unmarshal %#v", b, got, want)
		}
	})
}

func TestDecodeFlatCases(t *testing.T) {
	for s, ok := range map[string]bool{
		`{"id":1,"amount":37.5,"currency":"USD","customer":"c01"}`:    true,
		` { "a" : true , "b":false,"c":null, "d":-0.5e+3, "é":"ü" } `: true,
		`{}`: true, `{"a":1,"a":2}`: true,
		`{"a":01}`: false, `{"a":1.}`: false, `{"a":1e400}`: false, `{"a":"\u00e9"}`: false,
		`{"a":{"b":1}}`: false, `{"a":1,}`: false, `{"a":1}x`: false, `[1]`: false, `{"a":tru}`: false,
	} {
		if _, got := DecodeFlat([]byte(s)); got != ok {
			t.Errorf("DecodeFlat(%q) ok = %v, want %v", s, got, ok)
		}
	}
}
