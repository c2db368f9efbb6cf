package engine

import (
	"errors"
	"testing"
	"time"
)

func TestPolicyDecide(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	stream := Capabilities{Ack: true}
	durable := Capabilities{Ack: true, DurableDelay: true}
	claiming := Capabilities{Ack: true, RetryInPlace: true, MinIdle: 30 * time.Second, DeliveryCount: true}
	reliableList := Capabilities{Ack: true}
	bare := Capabilities{} // simple list, pubsub, file, pipe

	type want struct {
		action    Action
		label     string
		hold      bool
		holdDue   time.Duration // from now
		holdUntil time.Duration // ActLeave
		due       time.Duration // ActDelay
		note      bool
	}
	tests := []struct {
		name    string
		policy  Policy
		attempt int
		outcome Outcome
		want    want
	}{
		{"stream ack", Policy{Caps: stream}, 1, Ack(), want{action: ActAck, label: "ack"}},
		{"stream drop", Policy{Caps: stream}, 1, Drop(), want{action: ActAck, label: "drop"}},
		{"stream retry copies", Policy{Caps: stream}, 1, Retry(), want{action: ActRequeue, label: "retry"}},
		{"stream retry_after runtime", Policy{Caps: stream}, 1, RetryAfter(5 * time.Second), want{action: ActAck, label: "retry_after", hold: true, holdDue: 5 * time.Second}},
		{"stream retry_after durable", Policy{Caps: durable}, 1, RetryAfter(5 * time.Second), want{action: ActDelay, label: "retry_after", due: 5 * time.Second}},
		{"claiming ack", Policy{Caps: claiming}, 1, Ack(), want{action: ActAck, label: "ack"}},
		{"claiming retry stays pending", Policy{Caps: claiming}, 1, Retry(), want{action: ActLeave, label: "retry"}},
		{"claiming short delay waits min_idle", Policy{Caps: claiming}, 1, RetryAfter(5 * time.Second), want{action: ActLeave, label: "retry_after"}},
		{"claiming long delay held alive", Policy{Caps: claiming}, 1, RetryAfter(2 * time.Minute), want{action: ActLeave, label: "retry_after", holdUntil: 90 * time.Second}},
		{"reliable list retry copies", Policy{Caps: reliableList}, 2, Retry(), want{action: ActRequeue, label: "retry"}},
		{"bare ack", Policy{Caps: bare}, 1, Ack(), want{action: ActAck, label: "ack"}},
		{"bare retry unsupported", Policy{Caps: bare}, 1, Retry(), want{action: ActAck, label: "retry", note: true}},
		{"bare retry under cap copies", Policy{Caps: bare, MaxAttempts: 3}, 1, Retry(), want{action: ActRequeue, label: "retry"}},
		{"bare retry with dead letter copies", Policy{Caps: bare, DeadLetter: "dlq"}, 1, Retry(), want{action: ActRequeue, label: "retry"}},
		{"bare retry_after runtime copy", Policy{Caps: bare}, 1, RetryAfter(time.Second), want{action: ActAck, label: "retry_after", hold: true, holdDue: time.Second}},
		{"cap reached dead letters", Policy{Caps: stream, MaxAttempts: 3, DeadLetter: "dlq"}, 3, Retry(), want{action: ActDeadLetter, label: "dead_letter", note: true}},
		{"cap reached on retry_after", Policy{Caps: stream, MaxAttempts: 3, DeadLetter: "dlq"}, 3, RetryAfter(time.Second), want{action: ActDeadLetter, label: "dead_letter", note: true}},
		{"cap reached claiming", Policy{Caps: claiming, MaxAttempts: 2, DeadLetter: "dlq"}, 2, Retry(), want{action: ActDeadLetter, label: "dead_letter", note: true}},
		{"below cap retries", Policy{Caps: stream, MaxAttempts: 3, DeadLetter: "dlq"}, 2, Retry(), want{action: ActRequeue, label: "retry"}},
		{"cap without dead letter rejects", Policy{Caps: stream, MaxAttempts: 3}, 3, Retry(), want{action: ActAck, label: "rejected", note: true}},
		{"handler dead letter", Policy{Caps: stream, DeadLetter: "dlq"}, 1, DeadLetter("http 400"), want{action: ActDeadLetter, label: "dead_letter", note: true}},
		{"handler dead letter without one", Policy{Caps: stream}, 1, DeadLetter("http 400"), want{action: ActAck, label: "rejected", note: true}},
		{"cap does not touch ack", Policy{Caps: stream, MaxAttempts: 1, DeadLetter: "dlq"}, 1, Ack(), want{action: ActAck, label: "ack"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &Delivery{Message: Message{Key: "orders", ID: "1-1", Headers: map[string]string{"a": "b"}, Payload: []byte("p")}, Attempt: tt.attempt}
			dec := tt.policy.Decide(d, tt.outcome, nil, now)
			s := dec.Settlement
			if s.Delivery != d || s.Action != tt.want.action || dec.Label.String() != tt.want.label {
				t.Fatalf("got action %s label %q, want %s %q", s.Action, dec.Label, tt.want.action, tt.want.label)
			}
			if (dec.Hold != nil) != tt.want.hold {
				t.Fatalf("hold = %v, want %v", dec.Hold != nil, tt.want.hold)
			}
			if tt.want.hold && !dec.HoldDue.Equal(now.Add(tt.want.holdDue)) {
				t.Errorf("hold due %v, want now+%v", dec.HoldDue, tt.want.holdDue)
			}
			if tt.want.holdUntil != 0 && !s.HoldUntil.Equal(now.Add(tt.want.holdUntil)) || tt.want.holdUntil == 0 && !s.HoldUntil.IsZero() {
				t.Errorf("hold until %v, want now+%v", s.HoldUntil, tt.want.holdUntil)
			}
			if tt.want.due != 0 && !s.Due.Equal(now.Add(tt.want.due)) {
				t.Errorf("due %v, want now+%v", s.Due, tt.want.due)
			}
			if (dec.Note != "") != tt.want.note {
				t.Errorf("note %q, want note=%v", dec.Note, tt.want.note)
			}
			switch s.Action {
			case ActRequeue, ActDelay:
				if s.Copy.Headers[HeaderRetryCount] != itoa(tt.attempt) || s.Copy.Key != "orders" || s.Copy.Headers["a"] != "b" {
					t.Errorf("copy %+v: want x-retry-count %d, key orders, headers kept", s.Copy, tt.attempt)
				}
				if _, ok := d.Headers[HeaderRetryCount]; ok {
					t.Errorf("original headers changed")
				}
			}
			if dec.Hold != nil && dec.Hold.Headers[HeaderRetryCount] != itoa(tt.attempt) {
				t.Errorf("held copy x-retry-count %q, want %d", dec.Hold.Headers[HeaderRetryCount], tt.attempt)
			}
			if dec.Hold != nil && (string(dec.Hold.Payload) != string(d.Payload) || len(d.Payload) > 0 && &dec.Hold.Payload[0] == &d.Payload[0]) {
				t.Errorf("held copy's payload %q shares the delivery's bytes or differs from %q", dec.Hold.Payload, d.Payload)
			}
		})
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

func TestPolicyDeadLetterHeaders(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	p := Policy{Caps: Capabilities{Ack: true}, MaxAttempts: 3, DeadLetter: "payouts.dlq"}
	d := &Delivery{Message: Message{Key: "payouts", ID: "5-0", Headers: map[string]string{"x-retry-count": "2", "k": "v"}, Payload: []byte(`{"id":1}`)}, Attempt: 3}
	dec := p.Decide(d, Retry(), errors.New("gateway down"), now)
	c := dec.Settlement.Copy
	want := map[string]string{
		"k":                    "v",
		"x-retry-count":        "2",
		"x-dead-letter-reason": "max_attempts 3 reached: gateway down",
		"x-original-key":       "payouts",
		"x-original-id":        "5-0",
		"x-attempts":           "3",
		"x-failed-at":          "2026-11-29T12:00:00Z",
	}
	if c.Key != "payouts.dlq" || dec.Settlement.DeadLetterKey != "payouts.dlq" || string(c.Payload) != `{"id":1}` {
		t.Fatalf("copy %+v", c)
	}
	if len(c.Headers) != len(want) {
		t.Fatalf("headers %v, want %v", c.Headers, want)
	}
	for k, v := range want {
		if c.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, c.Headers[k], v)
		}
	}

	// No id on the delivery: no x-original-id.
	d2 := &Delivery{Message: Message{Key: "in", Headers: map[string]string{}}, Attempt: 4}
	dec2, ok := p.Before(d2, now)
	if !ok || dec2.Settlement.Action != ActDeadLetter {
		t.Fatalf("Before: %v %+v", ok, dec2)
	}
	if _, has := dec2.Settlement.Copy.Headers[HeaderOriginalID]; has {
		t.Errorf("x-original-id set for a message without id")
	}
	if got := dec2.Settlement.Copy.Headers[HeaderAttempts]; got != "4" {
		t.Errorf("x-attempts = %q, want 4", got)
	}
	if _, ok := p.Before(&Delivery{Attempt: 3}, now); ok {
		t.Errorf("attempt 3 of 3 must run")
	}
}
