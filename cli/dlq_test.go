package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports"
)

// fakeDLQ is a DeadLetterStore over a slice, for the purge prompt.
type fakeDLQ struct{ letters []*engine.Message }

func (f *fakeDLQ) CheckRedrive() error { return nil }

func (f *fakeDLQ) ListDeadLetters(_ context.Context, _ *transports.Env, q transports.DeadLetterQuery) ([]transports.DeadLetter, int64, error) {
	var out []transports.DeadLetter
	var total int64
	for _, m := range f.letters {
		if ok, _ := q.Selects(m); ok {
			total++
			if q.Limit == 0 || len(out) < q.Limit {
				out = append(out, transports.DeadLetter{Message: m})
			}
		}
	}
	return out, total, nil
}

func (f *fakeDLQ) RedriveDeadLetters(context.Context, *transports.Env, transports.DeadLetterQuery) (int, string, error) {
	return 0, "", nil
}

func (f *fakeDLQ) PurgeDeadLetters(_ context.Context, _ *transports.Env, q transports.DeadLetterQuery) (int, error) {
	var kept []*engine.Message
	n := 0
	for _, m := range f.letters {
		if ok, _ := q.Selects(m); ok && (q.Limit == 0 || n < q.Limit) {
			n++
			continue
		}
		kept = append(kept, m)
	}
	f.letters = kept
	return n, nil
}

// TestDLQPurgeAsks: purge asks with the count of letters it would delete and deletes only on yes.
func TestDLQPurgeAsks(t *testing.T) {
	letters := func() *fakeDLQ {
		return &fakeDLQ{letters: []*engine.Message{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}}}
	}
	for _, tc := range []struct {
		answer string
		limit  int
		code   int
		left   int
		prompt string
	}{
		{"y\n", 0, ExitOK, 0, "delete 3 dead letters of pay? [y/N] "},
		{"yes\n", 2, ExitOK, 1, "delete 2 dead letters of pay? [y/N] "},
		{"\n", 0, ExitConfig, 3, "delete 3 dead letters of pay? [y/N] "},
		{"", 0, ExitConfig, 3, "delete 3 dead letters of pay? [y/N] "},
	} {
		f := letters()
		var out, errOut bytes.Buffer
		stdio := Stdio{In: strings.NewReader(tc.answer), Out: &out, Err: &errOut}
		code, err := dlqPurge(context.Background(), f, nil, "pay", "pay.dlq", transports.DeadLetterQuery{Limit: tc.limit}, true, stdio)
		if err != nil || code != tc.code || len(f.letters) != tc.left || !strings.HasPrefix(errOut.String(), tc.prompt) {
			t.Errorf("answer %q: code %d, %v, %d left, stderr %q", tc.answer, code, err, len(f.letters), errOut.String())
		}
	}
}
