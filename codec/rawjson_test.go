package codec

import (
	"encoding/json"
	"testing"
)

// Every byte survives a raw JSON string; escapes decode as encoding/json decodes them.
func TestRawJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\" b\\ nl\n nul\x00 us\x1f del\x7f", "bad\xff\xfe\x80", "héllo 🎉"} {
		lit := string(AppendRawJSONString(nil, s))
		got, err := NewRawJSON(lit).String()
		if err != nil || got != s {
			t.Errorf("%q written as %s reads back %q, %v", s, lit, got, err)
		}
	}
	for _, lit := range []string{`"a\/b\b\f\n\r\t"`, `"\u00e9\u4e16"`, `"\ud83c\udf89"`, `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatal(err)
		}
		if got, err := NewRawJSON(lit).String(); err != nil || got != want {
			t.Errorf("%s: %q, %v; encoding/json reads %q", lit, got, err, want)
		}
	}
	for _, bad := range []string{``, `x`, `"`, `"abc`, `"\`, `"\x"`, `"\u12"`, `"\u12g4"`, `"\u+123"`} {
		if got, err := NewRawJSON(bad).String(); err == nil {
			t.Errorf("%s read as %q", bad, got)
		}
	}
}

func TestRawJSONStructure(t *testing.T) {
	p := NewRawJSON(` { "n" : -1.5e2 , "a" : [ "x" , "y" ] , "o" : { } , "e" : [ ] } `)
	var got []string
	var n float64
	err := p.Object(func(name string) error {
		got = append(got, name)
		switch name {
		case "n":
			var err error
			n, err = p.Number()
			return err
		case "a":
			return p.Array(func() error {
				s, err := p.String()
				got = append(got, s)
				return err
			})
		case "o":
			return p.Object(func(string) error { t.Fatal("member of an empty object"); return nil })
		}
		return p.Array(func() error { t.Fatal("element of an empty array"); return nil })
	})
	if err != nil || p.End() != nil || n != -150 || len(got) != 6 {
		t.Fatalf("read %q %v, %v", got, n, err)
	}
	for _, bad := range []string{`{`, `{"a"}`, `{"a":1 "b":2}`, `[1,]`, `{"a":x}`, `[`} {
		p := NewRawJSON(bad)
		var err error
		if bad[0] == '{' {
			err = p.Object(func(string) error { _, err := p.Number(); return err })
		} else {
			err = p.Array(func() error { _, err := p.Number(); return err })
		}
		if err == nil {
			t.Errorf("%s read", bad)
		}
	}
	p = NewRawJSON(`{} x`)
	if err := p.Object(nil); err != nil || p.End() == nil {
		t.Fatal("trailing data not reported")
	}
}
