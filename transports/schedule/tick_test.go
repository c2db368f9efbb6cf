package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/transports/transporttest"
)

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := loadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// every ticks at multiples of its interval from the epoch: the same instants whenever a process
// starts.
func TestEveryAlignsToTheEpoch(t *testing.T) {
	c, err := Every(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ after, want string }{
		{"2026-12-03T10:00:07Z", "2026-12-03T10:00:30Z"},
		{"2026-12-03T10:00:30Z", "2026-12-03T10:01:00Z"}, // strictly after
		{"2026-12-03T10:00:29Z", "2026-12-03T10:00:30Z"},
		{"1969-12-31T23:59:45Z", "1970-01-01T00:00:00Z"}, // before the epoch too
		{"1969-12-31T23:59:15Z", "1969-12-31T23:59:30Z"},
	} {
		if got := c.Next(at(t, tc.after)); !got.Equal(at(t, tc.want)) {
			t.Errorf("every 30s after %s = %s, want %s", tc.after, got, tc.want)
		}
	}
	h, _ := Every(time.Hour)
	if got := h.Next(at(t, "2026-12-03T10:59:59.5Z")); !got.Equal(at(t, "2026-12-03T11:00:00Z")) {
		t.Errorf("every 1h ticks at %s, want on the hour", got)
	}
	if _, err := Every(500 * time.Millisecond); err == nil {
		t.Error("every 500ms accepted")
	}
	if c.String() != "every 30s" {
		t.Errorf("String() = %q", c.String())
	}
}

// cron reads its fields in the time zone, summer time included.
func TestCronInTimezone(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	c, err := ParseCron("0 2 * * *", berlin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ after, want string }{
		{"2026-12-03T00:00:00Z", "2026-12-03T01:00:00Z"}, // CET, UTC+1
		{"2026-07-03T00:00:00Z", "2026-07-04T00:00:00Z"}, // CEST, UTC+2: 02:00 was at 00:00Z
		{"2026-07-03T23:59:59Z", "2026-07-04T00:00:00Z"},
	} {
		if got := c.Next(at(t, tc.after)); !got.Equal(at(t, tc.want)) || got.Location() != time.UTC {
			t.Errorf("0 2 * * * Berlin after %s = %s, want %s (UTC)", tc.after, got, tc.want)
		}
	}
	utc, _ := ParseCron("0 2 * * *", time.UTC)
	if got := utc.Next(at(t, "2026-12-03T00:00:00Z")); !got.Equal(at(t, "2026-12-03T02:00:00Z")) {
		t.Errorf("0 2 * * * UTC = %s", got)
	}
	if c.String() != "0 2 * * * Europe/Berlin" {
		t.Errorf("String() = %q", c.String())
	}

	// 2026-03-29 02:30 does not exist in Berlin (02:00 -> 03:00): no tick that day.
	skip, _ := ParseCron("30 2 * * *", berlin)
	if got := skip.Next(at(t, "2026-03-28T12:00:00Z")); !got.Equal(at(t, "2026-03-30T00:30:00Z")) {
		t.Errorf("30 2 * * * over the change to summer time = %s, want 2026-03-30T00:30:00Z", got)
	}
	// 2026-10-25 02:30 happens twice (03:00 -> 02:00): one tick.
	ticks, _ := skip.Ticks(at(t, "2026-10-24T12:00:00Z"), at(t, "2026-10-25T12:00:00Z"), 10)
	if len(ticks) != 1 {
		t.Errorf("30 2 * * * over the change back ticks %v, want once", ticks)
	}
}

func TestCronRefusesWhatIsNotFiveFields(t *testing.T) {
	for expr, want := range map[string]string{
		"@daily":                   "descriptor",
		"@every 1h":                "descriptor",
		"TZ=Europe/Berlin 0 2 * *": "timezone",
		"0 2 * *":                  "expected exactly 5 fields",
		"0 2 * * * *":              "expected exactly 5 fields",
		"61 * * * *":               "above maximum",
		"0 2 * * mon-xyz":          "xyz",
	} {
		_, err := ParseCron(expr, time.UTC)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCron(%q) = %v, want an error about %q", expr, err, want)
		}
	}
	for _, expr := range []string{"*/15 9-17 * * 1-5", "0 0 1 1 *", "0 2 * * MON"} {
		if _, err := ParseCron(expr, time.UTC); err != nil {
			t.Errorf("ParseCron(%q): %v", expr, err)
		}
	}
}

func TestZones(t *testing.T) {
	if _, err := loadZone("Europe/Berlin"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"Local", "Mars/Olympus", "utc+1"} {
		if _, err := loadZone(bad); err == nil {
			t.Errorf("zone %q accepted", bad)
		}
	}
}

// Ticks lists (after, upTo], oldest first, the newest limit of them.
func TestTicks(t *testing.T) {
	c, _ := Every(10 * time.Second)
	got, dropped := c.Ticks(at(t, "2026-12-03T10:00:00Z"), at(t, "2026-12-03T10:00:40Z"), 10)
	if len(got) != 4 || dropped != 0 || !got[0].Equal(at(t, "2026-12-03T10:00:10Z")) || !got[3].Equal(at(t, "2026-12-03T10:00:40Z")) {
		t.Errorf("Ticks = %v (%d dropped)", got, dropped)
	}
	got, dropped = c.Ticks(at(t, "2026-12-03T10:00:00Z"), at(t, "2026-12-03T10:00:40Z"), 2)
	if len(got) != 2 || dropped != 2 || !got[0].Equal(at(t, "2026-12-03T10:00:30Z")) {
		t.Errorf("Ticks limited = %v (%d dropped)", got, dropped)
	}
	never, _ := ParseCron("0 0 30 2 *", time.UTC) // 30 February
	if n := never.Next(at(t, "2026-12-03T10:00:00Z")); !n.IsZero() {
		t.Errorf("30 February ticks at %s", n)
	}
}

// start: without catch_up, now; with it, after the last tick taken, at most catch_up back; a
// schedule that never fired has missed nothing.
func TestCatchUpWindow(t *testing.T) {
	every, _ := Every(time.Second)
	for _, tc := range []struct {
		name    string
		catchUp time.Duration
		last    time.Duration // ago; 0: none
		want    time.Duration // ago
	}{
		{"no catch_up", 0, 5 * time.Second, 0},
		{"never fired", time.Minute, 0, 0},
		{"within", time.Minute, 5 * time.Second, 5 * time.Second},
		{"beyond", time.Minute, time.Hour, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pipeline := "catchup-" + strings.ReplaceAll(tc.name, " ", "-")
			now := time.Now()
			if tc.last > 0 {
				memClaimer{pipeline}.Claim(t.Context(), now.Add(-tc.last))
			}
			s, err := New(nil, Options{Pipeline: pipeline, Clock: every, CatchUp: tc.catchUp}, transporttest.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			from, err := s.start(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if ago := time.Since(from); ago < tc.want || ago > tc.want+time.Second {
				t.Errorf("start is %s ago, want %s", ago, tc.want)
			}
		})
	}
}
