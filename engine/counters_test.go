package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// progressLine is what a progress or summary line says about outcomes.
type progressLine struct {
	Message  string           `json:"message"`
	Handled  int64            `json:"handled"`
	Outcomes map[string]int64 `json:"outcomes"`
}

// logLines returns the lines of logs whose message is msg.
func logLines(t *testing.T, logs *syncBuf, msg string) []progressLine {
	var out []progressLine
	for _, b := range bytes.Split([]byte(logs.String()), []byte("\n")) {
		var pl progressLine
		if len(b) == 0 {
			continue
		}
		if err := json.Unmarshal(b, &pl); err != nil {
			t.Fatalf("log line %q: %v", b, err)
		}
		if pl.Message == msg {
			out = append(out, pl)
		}
	}
	return out
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// mixedOutcomes settles deliveries as ack, drop, dead_letter and retry by turns.
func mixedOutcomes(_ context.Context, d *Delivery) Result {
	n, _ := strconv.Atoi(d.ID)
	return Result{Outcome: []Outcome{Ack(), Drop(), DeadLetter("bad"), Retry()}[n%4]}
}

// Every progress line's handled is the sum of its outcomes, even while handlers settle as it is
// written; once the pipeline is idle, the last line, Status and Totals say the same, to the
// message.
func TestProgressStatusAndTotalsAgree(t *testing.T) {
	const n = 20000
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(n), batch: 64, infinite: true}
	p := pipeline(src, mixedOutcomes)
	p.MaxAttempts, p.DeadLetter = 3, "dlq"
	var logs syncBuf
	p.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
	e := New(Options{Progress: time.Millisecond}, p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	var last progressLine
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ls := logLines(t, &logs, "progress"); len(ls) > 0 {
			last = ls[len(ls)-1]
			if last.Handled == n {
				for _, l := range ls {
					if sum(l.Outcomes) != l.Handled {
						t.Fatalf("progress line: outcomes %v sum to %d, handled %d", l.Outcomes, sum(l.Outcomes), l.Handled)
					}
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress line said handled %d; last %+v", n, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := e.Status()[0]
	nonZero := maps.Clone(st.Totals)
	maps.DeleteFunc(nonZero, func(_ string, v int64) bool { return v == 0 })
	if !maps.Equal(nonZero, last.Outcomes) {
		t.Errorf("status totals %v, progress line %v", st.Totals, last.Outcomes)
	}
	tot := e.Totals()
	if len(tot) != 1 || tot[0].Name != "p" || tot[0].Outcomes.Handled() != n {
		t.Fatalf("Totals = %+v, want p with %d handled", tot, n)
	}
	for i, c := range tot[0].Outcomes {
		if l := Label(i).String(); st.Totals[l] != c {
			t.Errorf("%s: Totals %d, Status %d", l, c, st.Totals[l])
		}
	}
	if st.Totals["ack"] != n/4 || st.Totals["dead_letter"] != n/4 || st.Totals["retry"] != n/4 {
		t.Errorf("status totals %v, want %d each of ack, dead_letter and retry", st.Totals, n/4)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The summary line of a finite input agrees with Status and Totals.
func TestSummaryAgreesWithStatus(t *testing.T) {
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(101)}
	p := pipeline(src, mixedOutcomes)
	p.MaxAttempts, p.DeadLetter = 3, "dlq"
	var logs syncBuf
	p.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
	e := New(Options{}, p)
	if err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ls := logLines(t, &logs, "input done")
	if len(ls) != 1 || ls[0].Handled != 101 || sum(ls[0].Outcomes) != 101 {
		t.Fatalf("summary lines %+v, want one with 101 handled", ls)
	}
	st, tot := e.Status()[0], e.Totals()[0].Outcomes
	for i, c := range tot {
		l := Label(i).String()
		if st.Totals[l] != c || ls[0].Outcomes[l] != c {
			t.Errorf("%s: Totals %d, Status %d, summary %d", l, c, st.Totals[l], ls[0].Outcomes[l])
		}
	}
}

// Totals keep what a pipeline counted after it is stopped and started anew (a reload), as a
// Prometheus counter does; Status shows the run of now.
func TestTotalsSurviveARestart(t *testing.T) {
	first := &fakeSource{deliveries: deliveries(3), infinite: true}
	ack := func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} }
	e := New(Options{}, pipeline(first, ack))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	<-e.Started()
	waitFor(t, func() bool { s := e.Status(); return len(s) == 1 && s[0].Totals["ack"] == 3 })
	if err := e.Stop("p"); err != nil {
		t.Fatal(err)
	}
	if s, tot := e.Status(), e.Totals(); len(s) != 0 || len(tot) != 1 || tot[0].Outcomes[OutcomeAck] != 3 {
		t.Fatalf("after Stop: status %+v, totals %+v", s, tot)
	}
	if err := e.Start(pipeline(&fakeSource{deliveries: deliveries(2), infinite: true}, ack)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { s := e.Status(); return len(s) == 1 && s[0].Totals["ack"] == 2 })
	if tot := e.Totals(); len(tot) != 1 || tot[0].Outcomes[OutcomeAck] != 5 || tot[0].Outcomes.Handled() != 5 {
		t.Fatalf("after the second run: totals %+v, want 5 acks", tot)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tot := e.Totals(); tot[0].Outcomes[OutcomeAck] != 5 {
		t.Fatalf("after Run: totals %+v, want 5 acks", tot)
	}
}
