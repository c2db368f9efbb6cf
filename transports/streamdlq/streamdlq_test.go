package streamdlq

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports"
)

func TestMain(m *testing.M) {
	os.Exit(redistest.Main(m)) // one redis-server shared by the package's tests
}

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

// ids returns the entry ids of dls.
func ids(dls []transports.DeadLetter) []string {
	out := []string{}
	for _, dl := range dls {
		out = append(out, dl.ID)
	}
	return out
}

// TestPageAndList: PageDeadLetters reads one page from either end with the stream's length;
// ListDeadLetters reads oldest first, counting the stream without a filter and the selected
// letters with one. A missing key has no letters.
func TestPageAndList(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	for i := range 6 {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "dl", ID: fmt.Sprintf("%d-1", i+1), Values: []string{"payload", fmt.Sprint(i), "x-dead-letter-reason", "max_attempts"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	pages := []struct {
		key           string
		newest        bool
		offset, limit int
		want          []string
		total         int64
	}{
		{"dl", true, 1, 2, []string{"5-1", "4-1"}, 6},
		{"dl", false, 4, 5, []string{"5-1", "6-1"}, 6},
		{"dl", false, 6, 5, []string{}, 6},
		{"dl", true, 0, 0, []string{}, 6},
		{"missing", true, 0, 5, []string{}, 0},
	}
	for _, p := range pages {
		got, total, err := PageDeadLetters(ctx, c, p.key, p.newest, p.offset, p.limit)
		if err != nil || total != p.total || !slices.Equal(ids(got), p.want) {
			t.Errorf("PageDeadLetters(%s, newest %v, %d, %d) = %q, %d, %v; want %q, %d", p.key, p.newest, p.offset, p.limit, ids(got), total, err, p.want, p.total)
		}
	}
	got, _, _ := PageDeadLetters(ctx, c, "dl", false, 0, 1)
	if m := got[0].Message; m.Key != "dl" || string(m.Payload) != "0" || m.Headers["x-dead-letter-reason"] != "max_attempts" {
		t.Errorf("first letter = key %q payload %q headers %v", m.Key, m.Payload, m.Headers)
	}

	lists := []struct {
		key   string
		q     transports.DeadLetterQuery
		want  []string
		total int64
	}{
		{"dl", transports.DeadLetterQuery{Limit: 2}, []string{"1-1", "2-1"}, 6},
		{"dl", transports.DeadLetterQuery{}, []string{"1-1", "2-1", "3-1", "4-1", "5-1", "6-1"}, 6},
		{"dl", transports.DeadLetterQuery{Limit: 1, Match: everyThird}, []string{"1-1"}, 2},
		{"missing", transports.DeadLetterQuery{}, []string{}, 0},
	}
	for _, l := range lists {
		got, total, err := ListDeadLetters(ctx, c, l.key, l.q)
		if err != nil || total != l.total || !slices.Equal(ids(got), l.want) {
			t.Errorf("ListDeadLetters(%s, limit %d, match %v) = %q, %d, %v; want %q, %d", l.key, l.q.Limit, l.q.Match != nil, ids(got), total, err, l.want, l.total)
		}
	}
}

// TestRedriveStartsOver: a redriven copy is a new entry of the target with the payload and the
// message's own headers, without the dead-letter, retry-count and delivery headers (SPEC §1
// "retry count reset"), and its letter is gone. A redrive onto the dead-letter stream itself
// is refused.
func TestRedriveStartsOver(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	m := &engine.Message{Key: "jobs", Payload: []byte("p"), Headers: map[string]string{"tenant": "a"}}
	for _, h := range redriveHeaders {
		m.Headers[h] = "1"
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "jobs.dlq", Values: codec.StreamFields(m)}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := Redrive(ctx, c, "jobs.dlq", "jobs.dlq", 0, nil); err == nil {
		t.Fatal("Redrive onto the dead-letter stream itself: no error")
	}
	n, err := Redrive(ctx, c, "jobs.dlq", "jobs", 0, nil)
	if err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v; want 1", n, err)
	}
	xs, _ := c.XRange(ctx, "jobs", "-", "+").Result()
	if len(xs) != 1 {
		t.Fatalf("target has %d entries, want 1", len(xs))
	}
	want := map[string]any{"payload": "p", "tenant": "a"}
	if fmt.Sprint(xs[0].Values) != fmt.Sprint(want) {
		t.Errorf("copy = %v, want %v", xs[0].Values, want)
	}
	if left, _ := c.XLen(ctx, "jobs.dlq").Result(); left != 0 {
		t.Errorf("%d letters left, want 0", left)
	}
}
