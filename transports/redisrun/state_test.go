package redisrun

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// The hand-split list reads as encoding/json reads it, escapes and commas in names included.
func TestListsRoundTrip(t *testing.T) {
	for _, l := range [][]string{nil, {"a"}, {"reserve", "charge"}, {"a,b", `q"x`, `back\slash`, "é", ""}} {
		s := jsonList(l)
		var want []string
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		got := parseList(s)
		if len(got) != len(want) {
			t.Fatalf("%s: %q, want %q", s, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: %q, want %q", s, got, want)
			}
		}
	}
	if got := parseList(`[ "a" , "b" ]`); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("spaced list: %q", got)
	}
	if got := parseList(""); got != nil {
		t.Errorf("empty field: %q", got)
	}
}

// A step's load (loadArgs, decodeLoaded) reads a run as decodeState reads its hash, whatever
// the protocol's reply shape, and a missing run is nil.
func TestLoadReadsEveryField(t *testing.T) {
	e := newEnv(t)
	st := &workflow.State{ID: "r1", Workflow: "order", Status: workflow.Compensating, Step: "release", Visit: 4,
		Input: json.RawMessage(`{"sku":"a"}`), Error: "declined", Finished: []string{"reserve"}, Pending: []string{"reserve"},
		Ending: workflow.Failed, FailedStep: "charge", Compensated: true, Fingerprint: "f1", TraceParent: "00-abc-def-01",
		StartedAt: time.UnixMilli(1_700_000_000_000), UpdatedAt: time.UnixMilli(1_700_000_001_000)}
	if err := e.rdb.HSet(e.ctx, e.k.run("r1"), stateFields(st)...).Err(); err != nil {
		t.Fatal(err)
	}
	want, err := decodeState("order", "r1", e.hgetall(e.k.run("r1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r1", "gone"} {
		cmd := redis.NewCmd(e.ctx, loadArgs(e.k.run(id))...)
		if err := e.rdb.Process(e.ctx, cmd); err != nil {
			t.Fatal(err)
		}
		got, err := decodeLoaded("order", id, cmd.Val(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if id == "gone" {
			if got != nil {
				t.Errorf("a missing run loads as %+v, want nil", got)
			}
			continue
		}
		stored := *st // as read back: times in UTC
		stored.StartedAt, stored.UpdatedAt = st.StartedAt.UTC(), st.UpdatedAt.UTC()
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(*got, stored) {
			t.Errorf("loaded %+v\nwant    %+v\nstored  %+v", got, want, st)
		}
	}
}
