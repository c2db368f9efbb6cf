package redisstream

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
)

func everyThird(m *engine.Message) (bool, error) {
	var n int
	fmt.Sscan(string(m.Payload), &n)
	return n%3 == 0, nil
}

// TestDeadLetterFilterAcrossPages: Redrive, Purge and Scan with a filter over more entries than
// one page: matching entries are handled oldest first, the others stay, and a limit counts
// handled entries.
func TestDeadLetterFilterAcrossPages(t *testing.T) {
	c := redistest.Shared(t).Client(t)
	ctx := context.Background()
	const n = 2*redrivePage + 50
	for _, op := range []string{"redrive", "purge", "limit"} {
		t.Run(op, func(t *testing.T) {
			dlq, target := "dlqf."+op+".dlq", "dlqf."+op
			var want, kept []string
			for i := range n {
				id := fmt.Sprintf("%d-1", i+1)
				if err := c.XAdd(ctx, &redis.XAddArgs{Stream: dlq, ID: id, Values: []string{"payload", fmt.Sprint(i)}}).Err(); err != nil {
					t.Fatal(err)
				}
				if i%3 == 0 && (op != "limit" || len(want) < 4) {
					want = append(want, fmt.Sprint(i))
				} else {
					kept = append(kept, id)
				}
			}
			got, total, err := Scan(ctx, c, dlq, 5, everyThird)
			if err != nil || total != (n+2)/3 || len(got) != 5 || string(got[4].Message.Payload) != "12" {
				t.Fatalf("Scan = %d letters, total %d, %v", len(got), total, err)
			}
			var done int
			switch op {
			case "redrive":
				done, err = Redrive(ctx, c, dlq, target, 0, everyThird)
			case "purge":
				done, err = Purge(ctx, c, dlq, 0, everyThird)
			case "limit":
				done, err = Purge(ctx, c, dlq, 4, everyThird)
			}
			if err != nil || done != len(want) {
				t.Fatalf("%s = %d, %v; want %d", op, done, err, len(want))
			}
			xs, _ := c.XRange(ctx, dlq, "-", "+").Result()
			var left []string
			for _, x := range xs {
				left = append(left, x.ID)
			}
			if !slices.Equal(left, kept) {
				t.Errorf("left %d entries, want the %d others, in order", len(left), len(kept))
			}
			if op == "redrive" {
				xs, _ := c.XRange(ctx, target, "-", "+").Result()
				var moved []string
				for _, x := range xs {
					moved = append(moved, fmt.Sprint(x.Values["payload"]))
				}
				if !slices.Equal(moved, want) {
					t.Errorf("moved %q, want %q", moved, want)
				}
			}
		})
	}
}
