package redisstream

import (
	"testing"
)

// A lag Redis cannot tell (an entry deleted past the group's position) is reported as an upper
// bound, entries-added minus the group's entries-read, never as 0 (SPEC §10).
func TestReadStatsLagBound(t *testing.T) {
	e := newEnv(t)
	ids := e.xaddN("s", 5)
	if err := e.rdb.XGroupCreate(e.ctx, "s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStats(e.ctx, e.rdb, "s", "g")
	if err != nil {
		t.Fatal(err)
	}
	if st.Lag != 5 || st.LagBound != 5 {
		t.Fatalf("lag %d bound %d, want 5 and 5", st.Lag, st.LagBound)
	}
	e.rdb.XDel(e.ctx, "s", ids[2]) // Redis cannot tell the lag any more
	st, err = ReadStats(e.ctx, e.rdb, "s", "g")
	if err != nil {
		t.Fatal(err)
	}
	if st.Lag != -1 || st.LagBound != 5 {
		t.Fatalf("lag %d bound %d, want -1 (unknown) and the upper bound 5", st.Lag, st.LagBound)
	}
}
