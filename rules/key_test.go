package rules

import (
	"slices"
	"testing"
)

// A key that is a payload field is read without the VM: it must give what the VM gives, value
// or error, for every payload, and leave the decoded payload for the handler.
func TestFlowKeyPayloadPath(t *testing.T) {
	payloads := []string{
		`{"customer":"c01","id":7,"a":{"b":2.5}}`,
		`{"customer":null,"a":{"b":{"c":1}}}`,
		`{"a":"not an object"}`,
		`{"customer":["x",1],"a":[1,2]}`,
		`{"customer":true}`,
		`[1,2]`, `"str"`, `null`, `not json`, ``,
	}
	for _, src := range []string{"payload.customer", "payload.id", "payload.a.b", "payload['a']['b']", "payload.a.b.c"} {
		k, err := CompileKey(src)
		if err != nil {
			t.Fatal(err)
		}
		if k.path == nil {
			t.Fatalf("%s: no payload path", src)
		}
		vm := &Key{program: k.program}
		for _, p := range payloads {
			d1, d2 := delivery(p, nil), delivery(p, nil)
			got, gotErr := k.FlowKey(d1)
			want, wantErr := vm.FlowKey(d2)
			if got != want || (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
				t.Errorf("%s on %s: got %q, %v; the VM gives %q, %v", src, p, got, gotErr, want, wantErr)
			}
			if d1.Decoded == nil {
				t.Errorf("%s on %s: the decoded payload is not kept", src, p)
			}
		}
	}
	for src, want := range map[string][]string{"payload.a.b": {"a", "b"}, "headers.x": nil, "payload": nil, "payload.a + 'x'": nil, "payload?.a": nil} {
		k, err := CompileKey(src)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(k.path, want) {
			t.Errorf("%s: path %q, want %q", src, k.path, want)
		}
	}
}

func BenchmarkFlowKey(b *testing.B) {
	k, err := CompileKey("payload.customer")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		k    *Key
	}{{"path", k}, {"vm", &Key{program: k.program}}} {
		b.Run(c.name, func(b *testing.B) {
			d := delivery(`{"id":1,"amount":37.5,"currency":"USD","customer":"c01"}`, nil)
			decoded(d) // the handler's decode is not the key's cost
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.k.FlowKey(d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
