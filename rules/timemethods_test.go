package rules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/expr-lang/expr"
)

// Each time method a rule may call goes through a direct function and gives what expr-lang's
// own reflective call gives, value and type alike.
func TestTimeMethodsMatchReflection(t *testing.T) {
	const at = `date('2026-03-04T05:06:07.123456789+02:00')`
	d := delivery(`{}`, nil)
	for name := range timeMethods {
		src := at + "." + name + "()"
		p, err := compile(src, kindValue)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if dis := p.prog.Disassemble(); !strings.Contains(dis, timeFuncPrefix+name) {
			t.Errorf("%s: not patched to %s%s:\n%s", src, timeFuncPrefix, name, dis)
		}
		got, err := p.run(&state{d: d})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		want, err := expr.Eval(src, nil) // no patcher: the reflective call
		if err != nil {
			t.Fatalf("%s unpatched: %v", src, err)
		}
		if got != want {
			t.Errorf("%s = %#v (%T), want %#v (%T)", src, got, got, want, want)
		}
	}
}

// Calls the fast path does not cover keep working through reflection, and a method used in an
// expression keeps its type for the checker.
func TestTimeMethodsElsewhere(t *testing.T) {
	d := delivery(`{}`, map[string]string{"sent": "5"})
	for _, tc := range []struct{ src, want string }{
		{`now().UnixMicro() > int(headers['sent'])`, "true"},
		{`now().Add(duration('1h')).After(now())`, "true"},
		{`now().Format('2006') >= '2026'`, "true"},
		{`date('2026-01-02').Month() == date('2026-01-03').Month()`, "true"},
		{`string(date('2026-01-02T00:00:00Z').Weekday())`, "Friday"},
		{`date('2026-01-02T00:00:00Z').UTC().Unix()`, "1767312000"},
	} {
		p, err := compile(tc.src, kindValue)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		got, err := p.run(&state{d: d})
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if s := fmt.Sprint(got); s != tc.want {
			t.Errorf("%s = %s, want %s", tc.src, s, tc.want)
		}
	}
	// A type error names the method as written, not the function it became.
	_, err := compile(`now().Unix() + 'a'`, kindValue)
	if err == nil || strings.Contains(err.Error(), timeFuncPrefix) {
		t.Errorf("got %v, want a type error without %q", err, timeFuncPrefix)
	}
}

// In an expression the VM runs, now().UnixMicro() allocates the time, the call's argument list
// and the result: three, where the reflective call took five. (As a whole emit value it is read
// without the VM: TestDirectClockValues.)
func TestTimeMethodAllocations(t *testing.T) {
	p, err := compile(`now().UnixMicro() > 0`, kindCondition)
	if err != nil {
		t.Fatal(err)
	}
	s := &state{d: delivery(`{}`, nil)}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := p.run(s); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Errorf("now().UnixMicro() > 0: %.0f allocations per run, want at most 3", allocs)
	}
}
