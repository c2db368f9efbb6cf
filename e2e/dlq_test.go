package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// flowrun dlq list --json/--full/--where, redrive --where and purge (SPEC §1) through the built
// binary, against a real redis-server; the helpers are inspect_test.go's.

const dlqStreamAndList = `
pipeline "pay" {
  source "stream" {
    stream = "dlqt.pay"
    group  = "g"
  }
  dead_letter = "dlqt.pay.dlq"
  rule "all" { outcome = "ack" }
}

pipeline "jobs" {
  source "list" {
    key = "dlqt.jobs"
  }
  dead_letter = "dlqt.jobs.dlq"
  rule "all" { outcome = "ack" }
}
`

// dlqSeed writes three stream letters (1-1 http 400 amount 5, 2-1 http 500 amount 50, 3-1 a
// long text payload) and three list letters (oldest first: n=1 boom, "two" bang, n=3 boom).
func dlqSeed(e *inspEnv) (long string) {
	long = strings.Repeat("x", 100)
	e.xadd("dlqt.pay.dlq", "1-1", append(dlqFields("http 400", "dlqt.pay", "7-0", "3"), "payload", `{"amount":5}`)...)
	e.xadd("dlqt.pay.dlq", "2-1", append(dlqFields("http 500", "dlqt.pay", "8-0", "1"), "payload", `{"amount":50}`)...)
	e.xadd("dlqt.pay.dlq", "3-1", append(dlqFields("exit 1", "dlqt.pay", "9-0", "2"), "payload", long)...)
	e.lpush("dlqt.jobs.dlq",
		`{"headers":{"x-dead-letter-reason":"boom","x-original-key":"dlqt.jobs","x-attempts":"3"},"payload":{"n":1}}`,
		`{"headers":{"x-dead-letter-reason":"bang","x-original-key":"dlqt.jobs","x-attempts":"1"},"payload":"two"}`,
		`{"headers":{"x-dead-letter-reason":"boom","x-original-key":"dlqt.jobs","x-attempts":"3"},"payload":{"n":3}}`,
	)
	return long
}

func TestDLQListJSONFullWhere(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(dlqStreamAndList)
	long := dlqSeed(e)

	r := inspRun(t, 0, "dlq", "list", "pay", "--json", cfg)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("--json printed %d lines:\n%s", len(lines), r.stdout)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first["id"] != "1-1" || first["key"] != "dlqt.pay" || first["reason"] != "http 400" ||
		first["failed_at"] != "2030-01-01T00:00:00Z" {
		t.Errorf("first letter = %v", first)
	}
	if p, ok := first["payload"].(map[string]any); !ok || p["amount"] != 5.0 {
		t.Errorf("JSON payload = %#v, want the object", first["payload"])
	}
	if h, ok := first["headers"].(map[string]any); !ok || h["x-original-id"] != "7-0" {
		t.Errorf("headers = %#v", first["headers"])
	}
	var third map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &third); err != nil || third["payload"] != long {
		t.Errorf("text payload = %#v (%v), want the whole string", third["payload"], err)
	}

	r = inspRun(t, 0, "dlq", "list", "jobs", "--json", "--where", `payload == "two"`, cfg)
	var two map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &two); err != nil || two["id"] != nil || two["key"] != "dlqt.jobs" || two["payload"] != "two" || two["reason"] != "bang" {
		t.Errorf("list letter = %v (%v)\n%s", two, err, r.stdout)
	}

	r = inspRun(t, 0, "dlq", "list", "pay", cfg)
	if strings.Contains(r.stdout, long) {
		t.Errorf("the table shows the whole payload without --full:\n%s", r.stdout)
	}
	r = inspRun(t, 0, "dlq", "list", "pay", "--full", cfg)
	if !strings.Contains(r.stdout, long) {
		t.Errorf("--full cut the payload:\n%s", r.stdout)
	}

	for _, tc := range []struct {
		args []string
		ids  []string
		note string
	}{
		{[]string{"pay", "--where", `payload.amount > 10`}, []string{"2-1"}, ""},
		{[]string{"pay", "--where", `reason startsWith "http"`, "--limit", "1"}, []string{"1-1"}, "1 of 2 dead letters matching --where in dlqt.pay.dlq shown (oldest first); --limit 0 shows all"},
		{[]string{"pay", "--where", `attempt >= 2 && failed_at > now()`}, []string{"1-1", "3-1"}, ""},
		{[]string{"pay", "--where", `key == "dlqt.pay" && id == "2-1"`}, []string{"2-1"}, ""},
	} {
		r := inspRun(t, 0, append([]string{"dlq", "list"}, append(tc.args, cfg)...)...)
		rows := inspTable(t, r.stdout)
		var ids []string
		for _, row := range rows[1:] {
			if strings.Contains(row[0], "dead letters") {
				if row[0] != tc.note {
					t.Errorf("%v: note %q, want %q", tc.args, row[0], tc.note)
				}
				continue
			}
			ids = append(ids, row[0])
		}
		if !slices.Equal(ids, tc.ids) {
			t.Errorf("%v: ids %q, want %q\n%s", tc.args, ids, tc.ids, r.stdout)
		}
	}
	r = inspRun(t, 0, "dlq", "list", "pay", "--where", `reason == "nope"`, cfg)
	if r.stdout != "no dead letters matching --where in dlqt.pay.dlq\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
}

// TestDLQWhereErrors: a bad --where is a filter error with its position, exit 1, before Redis is
// reached (the config points at a closed port).
func TestDLQWhereErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := inspConfig(t, dir, "redis://127.0.0.1:1", dlqStreamAndList)
	for _, tc := range []struct{ where, want string }{
		{`payload.a == paylod`, `flowrun dlq list: --where:1:14: unknown name "paylod"`},
		{`reason`, `flowrun dlq list: --where:1:1: `},
		{``, `flowrun dlq list: --where:1:1: empty expression`},
	} {
		r := inspRun(t, 1, "dlq", "list", "pay", "--where", tc.where, cfg)
		if !strings.HasPrefix(r.stderr, tc.want) {
			t.Errorf("--where %q: stderr %q, want prefix %q", tc.where, r.stderr, tc.want)
		}
	}
	r := inspRun(t, 2, "dlq", "purge", "pay", "--yes", cfg)
	if r.stderr == "" {
		t.Error("no message for an unreachable Redis")
	}
}

func TestDLQRedriveWhere(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(dlqStreamAndList)
	dlqSeed(e)

	r := inspRun(t, 0, "dlq", "redrive", "pay", "--where", `reason startsWith "http"`, cfg)
	if r.stdout != "redrove 2 dead letters to dlqt.pay\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	if got := e.xids("dlqt.pay.dlq"); !slices.Equal(got, []string{"3-1"}) {
		t.Errorf("left %q, want 3-1", got)
	}
	got := e.xrange("dlqt.pay")
	if len(got) != 2 || got[0]["payload"] != `{"amount":5}` || got[1]["payload"] != `{"amount":50}` {
		t.Errorf("dlqt.pay = %v", got)
	}

	// The list: only the boom letters move, the oldest first; "two" stays.
	all := e.lrange("dlqt.jobs.dlq")
	r = inspRun(t, 0, "dlq", "redrive", "jobs", "--where", `reason == "boom"`, cfg)
	if r.stdout != "redrove 2 dead letters to dlqt.jobs\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	if got := e.lrange("dlqt.jobs.dlq"); !slices.Equal(got, []string{all[1]}) {
		t.Errorf("left %q, want the bang letter", got)
	}
	if got := e.lrange("dlqt.jobs"); !slices.Equal(got, []string{`{"n":3}`, `{"n":1}`}) {
		t.Errorf("dlqt.jobs = %q", got)
	}

	// --limit counts moved letters, and letters that do not match stay in order.
	e.lpush("dlqt.jobs.dlq",
		`{"headers":{"x-dead-letter-reason":"boom"},"payload":4}`,
		`{"headers":{"x-dead-letter-reason":"bang"},"payload":5}`,
		`{"headers":{"x-dead-letter-reason":"boom"},"payload":6}`)
	before := e.lrange("dlqt.jobs.dlq") // head first: 6, 5, 4, two
	r = inspRun(t, 0, "dlq", "redrive", "jobs", "--where", `reason == "boom"`, "--limit", "1", cfg)
	if r.stdout != "redrove 1 dead letters to dlqt.jobs\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	if got, want := e.lrange("dlqt.jobs.dlq"), []string{before[0], before[1], before[3]}; !slices.Equal(got, want) {
		t.Errorf("left %q, want %q", got, want)
	}

	// A letter the filter fails on (payload.n of a text payload) does not match, with a warning.
	r = inspRun(t, 0, "dlq", "redrive", "jobs", "--where", `payload.n > 1`, cfg)
	if r.stdout != "redrove 0 dead letters to dlqt.jobs\n" || !strings.Contains(r.stderr, "warning: --where failed on 3 dead letters") {
		t.Errorf("stdout = %q, stderr = %q", r.stdout, r.stderr)
	}
}

func TestDLQPurge(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(dlqStreamAndList)
	dlqSeed(e)

	// Standard input is not a terminal here: without --yes it refuses, naming --yes.
	r := inspRun(t, 1, "dlq", "purge", "pay", cfg)
	if !strings.Contains(r.stderr, "--yes") {
		t.Errorf("stderr = %q", r.stderr)
	}
	if n := e.rdb.XLen(e.ctx, "dlqt.pay.dlq").Val(); n != 3 {
		t.Errorf("refused purge deleted: %d left", n)
	}

	r = inspRun(t, 0, "dlq", "purge", "pay", "--where", `payload.amount == 50`, "--yes", cfg)
	if r.stdout != "deleted 1 dead letters from dlqt.pay.dlq\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	if got := e.xids("dlqt.pay.dlq"); !slices.Equal(got, []string{"1-1", "3-1"}) {
		t.Errorf("left %q", got)
	}
	r = inspRun(t, 0, "dlq", "purge", "pay", "--limit", "1", "--yes", cfg)
	if got := e.xids("dlqt.pay.dlq"); !slices.Equal(got, []string{"3-1"}) {
		t.Errorf("left %q after --limit 1", got)
	}

	all := e.lrange("dlqt.jobs.dlq")
	r = inspRun(t, 0, "dlq", "purge", "jobs", "--where", `reason == "boom"`, "--yes", cfg)
	if r.stdout != "deleted 2 dead letters from dlqt.jobs.dlq\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	if got := e.lrange("dlqt.jobs.dlq"); !slices.Equal(got, []string{all[1]}) {
		t.Errorf("left %q", got)
	}
	r = inspRun(t, 0, "dlq", "purge", "jobs", "--yes", cfg)
	if n := e.rdb.LLen(e.ctx, "dlqt.jobs.dlq").Val(); n != 0 {
		t.Errorf("left %d", n)
	}
}
