package redislist

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
)

// everyThird matches the letters whose payload is a number divisible by 3.
func everyThird(m *engine.Message) (bool, error) {
	var n int
	fmt.Sscan(string(m.Payload), &n)
	return n%3 == 0, nil
}

// TestDeadLetterFilterAcrossPages: Redrive, Purge and Scan with a filter over more letters than
// one page: the matching ones are handled oldest first, the others stay in order, and a limit
// counts handled letters.
func TestDeadLetterFilterAcrossPages(t *testing.T) {
	c := redistest.Shared(t).Client(t)
	ctx := context.Background()
	const n = 2*redrivePage + 50
	for _, op := range []string{"redrive", "purge"} {
		t.Run(op, func(t *testing.T) {
			dlq, target := "dlqf."+op+".dlq", "dlqf."+op
			var want, kept []string
			for i := range n { // LPUSH: letter 0 is the oldest, at the tail
				el := fmt.Sprintf(`{"headers":{"x-dead-letter-reason":"r"},"payload":%d}`, i)
				lpush(t, c, dlq, el)
				if i%3 == 0 {
					want = append(want, fmt.Sprint(i))
				} else {
					kept = append(kept, el)
				}
			}
			got, total, err := Scan(ctx, c, dlq, 5, everyThird)
			if err != nil || total != int64(len(want)) || len(got) != 5 || string(got[4].Message.Payload) != "12" {
				t.Fatalf("Scan = %d letters, total %d, %v", len(got), total, err)
			}
			var done int
			if op == "redrive" {
				done, err = Redrive(ctx, c, dlq, target, 0, everyThird)
			} else {
				done, err = Purge(ctx, c, dlq, 0, everyThird)
			}
			if err != nil || done != len(want) {
				t.Fatalf("%s = %d, %v; want %d", op, done, err, len(want))
			}
			left := lrange(t, c, dlq)
			slices.Reverse(left)
			if !slices.Equal(left, kept) {
				t.Errorf("left %d letters, want the %d that do not match, in order", len(left), len(kept))
			}
			moved := lrange(t, c, target)
			slices.Reverse(moved)
			if op == "redrive" && !slices.Equal(moved, want) {
				t.Errorf("moved %q, want %q", moved, want)
			}
			if op == "purge" && len(moved) != 0 {
				t.Errorf("purge wrote %d", len(moved))
			}
		})
	}
	t.Run("limit", func(t *testing.T) {
		dlq := "dlqf.limit.dlq"
		for i := range 10 {
			lpush(t, c, dlq, fmt.Sprint(i))
		}
		done, err := Purge(ctx, c, dlq, 2, everyThird)
		if err != nil || done != 2 {
			t.Fatalf("Purge = %d, %v", done, err)
		}
		wantList(t, c, dlq, "9", "8", "7", "6", "5", "4", "2", "1")
	})
}
