package redisrun

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flowrun/flowrun/workflow"
)

// The hand-written history event reads back as encoding/json's does.
func TestEventJSONIsJSON(t *testing.T) {
	for _, e := range []workflow.Event{
		{Step: "charge", Visit: 3, Attempt: 2, Outcome: "retry", At: time.Date(2026, 12, 3, 10, 0, 0, 123456789, time.UTC), Error: `bad "card" <\n>`},
		{Outcome: "started", At: time.UnixMilli(1_700_000_000_000).In(time.FixedZone("x", 3600))},
		{Step: "é\u2028\x01", Error: "\xff"},
	} {
		s := eventJSON(e).(string)
		var got, want workflow.Event
		if err := json.Unmarshal([]byte(s), &got); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		b, _ := json.Marshal(e)
		_ = json.Unmarshal(b, &want)
		if got.Step != want.Step || got.Visit != want.Visit || got.Attempt != want.Attempt || got.Outcome != want.Outcome ||
			!got.At.Equal(want.At) || got.Error != want.Error {
			t.Errorf("%s reads as %+v, want %+v", s, got, want)
		}
	}
}
