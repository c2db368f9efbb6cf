package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// SPEC §10 "ACL": each Redis source kind runs as a user granted exactly the lines of docs/acl.md for it
// and for the options its pipeline uses (a dead letter, a rule emit, durable delays), and Redis's
// ACL LOG must stay empty: a command flowrun sends that the lines lack is denied and logged there
// even where go-redis swallows the error (CLIENT SETINFO) or a script calls it. The lines are read
// from docs/acl.md, "ACL: the commands flowrun sends", so that page cannot drift from what
// flowrun sends.
//
// Every pipeline reads "jobs" (group "jobs", consumer "w1") with the same rules (aclRules):
// "dead" always retries and so reaches the dead letter "jobs.dlq" at max_attempts = 2, "again"
// retries once, "later" asks for a delay once (200ms; on claiming and reclaim 700ms, longer than
// min_idle), and everything that is not dead ends in an emit and an ack. aclMessages sends 3 plain, 2 again, 2 later and 2 dead messages: 7 emits and
// 2 dead letters.

const (
	aclPassword = "acl-secret"
	aclUser     = "flowrun"
	aclAdmin    = "flowrun-admin"
	aclDeadline = 15 * time.Second
	// aclLongDelay is the delay "later" asks for on claiming and reclaim sources: longer than
	// their min_idle (300ms), so the keep-alive script keeps the entry from looking idle.
	aclLongDelay = "700ms"
	aclEmits     = 7 // messages of aclMessages that end in an emit and an ack
	aclDead      = 2 // messages of aclMessages that end in the dead letter
)

// aclMessages are the payloads every test sends, in order.
var aclMessages = []string{
	`{"n":1,"k":"ok"}`, `{"n":2,"k":"again"}`, `{"n":3,"k":"dead"}`, `{"n":4,"k":"later"}`,
	`{"n":5,"k":"ok"}`, `{"n":6,"k":"again"}`, `{"n":7,"k":"dead"}`, `{"n":8,"k":"later"}`,
	`{"n":9,"k":"ok"}`,
}

// aclRules is the rule set of every ACL pipeline, emitting with kind to key.
func aclRules(kind, key string) string { return aclRulesDelay(kind, key, "200ms") }

// aclRulesDelay is aclRules with the delay "later" asks for.
func aclRulesDelay(kind, key, delay string) string {
	return fmt.Sprintf(`  rule "dead" {
    when    = "payload.k == 'dead'"
    outcome = "retry"
  }
  rule "again" {
    when    = "payload.k == 'again' && attempt < 2"
    outcome = "retry"
  }
  rule "later" {
    when    = "payload.k == 'later' && attempt < 2"
    outcome = "retry_after('%s')"
  }
  rule "done" {
    emit %q {
      key = %q
    }
    outcome = "ack"
  }
`, delay, kind, key)
}

// aclEnv is one test's redis-server, an administrator's client on it (the default user, which
// creates the ACL users and reads the state) and a folder for the config.
type aclEnv struct {
	t     *testing.T
	srv   *redistest.Server
	admin *redis.Client
	dir   string
	ctx   context.Context
}

func newACLEnv(t *testing.T) *aclEnv {
	t.Helper()
	srv := redistest.Start(t)
	e := &aclEnv{t: t, srv: srv, admin: srv.Client(t), dir: t.TempDir(), ctx: context.Background()}
	t.Cleanup(func() { // before the server stops: a timeout is easier to read with what Redis refused
		if t.Failed() {
			if entries, err := e.admin.ACLLog(e.ctx, 100).Result(); err == nil {
				for _, x := range entries {
					t.Logf("ACL LOG: %s", aclEntry(x))
				}
			}
		}
	})
	return e
}

// config writes NAME.hcl: a redis block logging in as user, then the pipeline "jobs" with source
// (the source block), the pipeline attributes extra and rules.
func (e *aclEnv) config(name, user, source, extra, rules string) string {
	e.t.Helper()
	return writeFile(e.t, e.dir, name+".hcl", fmt.Sprintf(`redis "main" {
  url      = %q
  username = %q
  password = %q
}

pipeline "jobs" {
%s
  concurrency  = 2
  max_attempts = 2
  dead_letter  = "jobs.dlq"
%s
%s}
`, e.srv.URL, user, aclPassword, source, extra, rules))
}

var (
	aclReadmeOnce  sync.Once
	aclReadmeLines map[string][]string
	aclReadmeErr   error
)

// aclReadme returns the ACL lines of docs/acl.md, "ACL: the commands flowrun sends": in its code
// blocks, a comment line "# LABEL" followed by "ACL SETUSER USER RULE...". It maps each
// label to its rules.
func aclReadme(t *testing.T) map[string][]string {
	t.Helper()
	aclReadmeOnce.Do(func() {
		f, err := os.Open("../docs/acl.md")
		if err != nil {
			aclReadmeErr = err
			return
		}
		defer f.Close()
		lines := map[string][]string{}
		var in, fence bool
		label := ""
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case !fence && strings.HasPrefix(line, "# "):
				in = line == "# ACL: the commands flowrun sends"
				continue
			case !in:
				continue
			case strings.HasPrefix(line, "```"):
				fence, label = !fence, ""
			case fence && strings.HasPrefix(line, "# "):
				label = strings.TrimPrefix(line, "# ")
			case fence && strings.HasPrefix(line, "ACL SETUSER "):
				if fs := strings.Fields(line); label != "" && len(fs) > 3 {
					lines[label] = fs[3:] // after "ACL SETUSER USER"
				}
				label = ""
			}
		}
		if aclReadmeErr = sc.Err(); aclReadmeErr == nil && len(lines) == 0 {
			aclReadmeErr = fmt.Errorf("docs/acl.md has no ACL lines")
		}
		aclReadmeLines = lines
	})
	if aclReadmeErr != nil {
		t.Fatalf("reading the ACL lines of docs/acl.md: %v", aclReadmeErr)
	}
	return aclReadmeLines
}

// grant (re)creates user with exactly the lines of docs/acl.md "every connection" (and "every
// connection, Redis 7.2 or newer" on such a server), the lines labelled labels, and extra rules.
func (e *aclEnv) grant(user string, labels []string, extra ...string) {
	e.t.Helper()
	readme := aclReadme(e.t)
	all := []string{"every connection"}
	if e.serverAtLeast(7, 2) {
		all = append(all, "every connection, Redis 7.2 or newer")
	}
	var rules []string
	for _, l := range append(all, labels...) {
		rs, ok := readme[l]
		if !ok {
			e.t.Fatalf("docs/acl.md has no ACL line labelled %q", l)
		}
		for _, r := range rs {
			if r == ">PASSWORD" {
				r = ">" + aclPassword
			}
			rules = append(rules, r)
		}
	}
	rules = append(rules, extra...)
	if err := e.admin.ACLSetUser(e.ctx, user, rules...).Err(); err != nil {
		e.t.Fatalf("ACL SETUSER %s %s: %v", user, strings.Join(rules, " "), err)
	}
}

// rules returns the line of docs/acl.md labelled label, for a test that grants it changed.
func (e *aclEnv) rules(label string) []string {
	e.t.Helper()
	rs, ok := aclReadme(e.t)[label]
	if !ok {
		e.t.Fatalf("docs/acl.md has no ACL line labelled %q", label)
	}
	return append([]string(nil), rs...)
}

// serverAtLeast reports whether the redis-server is version major.minor or newer.
func (e *aclEnv) serverAtLeast(major, minor int) bool {
	e.t.Helper()
	info, err := e.admin.Info(e.ctx, "server").Result()
	if err != nil {
		e.t.Fatalf("info server: %v", err)
	}
	m := regexp.MustCompile(`redis_version:(\d+)\.(\d+)`).FindStringSubmatch(info)
	if m == nil {
		e.t.Fatalf("no redis_version in INFO server")
	}
	maj, _ := strconv.Atoi(m[1])
	mnr, _ := strconv.Atoi(m[2])
	return maj > major || maj == major && mnr >= minor
}

// denials returns ACL LOG's entries, one line each: what Redis refused and to whom. The
// eviction check's INFO and CONFIG GET at start (SPEC §10 "Eviction") are left out: the lines
// grant neither on purpose (docs/acl.md makes +info optional), and TestEvictionWarning shows
// that flowrun starts without them and that, with the optional line, nothing is refused.
func (e *aclEnv) denials() []string {
	e.t.Helper()
	entries, err := e.admin.ACLLog(e.ctx, 100).Result()
	if err != nil {
		e.t.Fatalf("acl log: %v", err)
	}
	var out []string
	for _, x := range entries {
		if !evictionCheck(x) {
			out = append(out, aclEntry(x))
		}
	}
	return out
}

// evictionCheck reports whether an ACL LOG entry is a refusal of the eviction check's commands.
func evictionCheck(x *redis.ACLLogEntry) bool {
	return x.Reason == "command" && (x.Object == "info" || x.Object == "config|get")
}

func aclEntry(x *redis.ACLLogEntry) string {
	return fmt.Sprintf("user %s refused %s %q (context %s, %d times)", x.Username, x.Reason, x.Object, x.Context, x.Count)
}

// checkCalled fails the test unless Redis ran each of cmds (INFO commandstats), to show that a
// test went down the path that sends them.
func (e *aclEnv) checkCalled(cmds ...string) {
	e.t.Helper()
	stats, err := e.admin.Info(e.ctx, "commandstats").Result()
	if err != nil {
		e.t.Fatalf("info commandstats: %v", err)
	}
	for _, c := range cmds {
		if !strings.Contains(stats, "cmdstat_"+c+":calls=") {
			e.t.Errorf("Redis never ran %s: the test did not exercise the path that sends it", strings.ToUpper(c))
		}
	}
}

// checkClean fails the test when Redis refused anything (ACL LOG) or flowrun logged a NOPERM.
func (e *aclEnv) checkClean(stderr string) {
	e.t.Helper()
	if d := e.denials(); len(d) > 0 {
		e.t.Errorf("Redis refused commands the lines of docs/acl.md do not grant:\n  %s", strings.Join(d, "\n  "))
	}
	if strings.Contains(strings.ToUpper(stderr), "NOPERM") || strings.Contains(stderr, "no permissions") {
		e.t.Errorf("flowrun logged a permission error:\n%s", aclGrep(stderr, "NOPERM", "no permissions"))
	}
}

// aclGrep returns the lines of s that contain any of subs (case-insensitive).
func aclGrep(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(strings.ToLower(l), strings.ToLower(sub)) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func (e *aclEnv) xlen(key string) int64 {
	n, err := e.admin.XLen(e.ctx, key).Result()
	if err != nil {
		return -1
	}
	return n
}

func (e *aclEnv) llen(key string) int64 {
	n, err := e.admin.LLen(e.ctx, key).Result()
	if err != nil {
		return -1
	}
	return n
}

// pending is the group "jobs"'s pending count on the stream "jobs", -1 on an error.
func (e *aclEnv) pending() int64 {
	p, err := e.admin.XPending(e.ctx, "jobs", "jobs").Result()
	if err != nil {
		return -1
	}
	return p.Count
}

// xaddAll adds aclMessages to the stream "jobs".
func (e *aclEnv) xaddAll() {
	e.t.Helper()
	for _, m := range aclMessages {
		if err := e.admin.XAdd(e.ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"payload", m}}).Err(); err != nil {
			e.t.Fatalf("xadd jobs: %v", err)
		}
	}
}

// lpushAll pushes aclMessages onto the list "jobs", the first read first.
func (e *aclEnv) lpushAll() {
	e.t.Helper()
	for _, m := range aclMessages {
		if err := e.admin.LPush(e.ctx, "jobs", m).Err(); err != nil {
			e.t.Fatalf("lpush jobs: %v", err)
		}
	}
}

// aclStop stops flowrun with SIGTERM and expects exit 0.
func aclStop(t *testing.T, p *proc) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("flowrun exited %d after SIGTERM, want 0", code)
	}
}

// inspectAndList runs flowrun inspect and flowrun dlq list as the user flowrun-admin, granted
// the lines of docs/acl.md "flowrun inspect" and "flowrun dlq list" (read-only key patterns), and
// returns the config it wrote, for a redrive.
func (e *aclEnv) inspectAndList(source string, wantDead int64) string {
	e.t.Helper()
	e.grant(aclAdmin, []string{"flowrun inspect", "flowrun dlq list"})
	cfg := e.config("admin", aclAdmin, source, "", aclRules("stream", "jobs.done"))
	r := flowrun(e.t, "", "inspect", "--json", "--consumer", "w1", cfg)
	if r.code != 0 {
		e.t.Fatalf("flowrun inspect as %s exited %d:\n%s", aclAdmin, r.code, r.stderr)
	}
	if want := fmt.Sprintf(`"dead_letters": %d`, wantDead); !strings.Contains(r.stdout, want) {
		e.t.Errorf("flowrun inspect does not show %s:\n%s", want, r.stdout)
	}
	r = flowrun(e.t, "", "dlq", "list", "jobs", cfg)
	if r.code != 0 {
		e.t.Fatalf("flowrun dlq list as %s exited %d:\n%s", aclAdmin, r.code, r.stderr)
	}
	if got := strings.Count(r.stdout, `"k":"dead"`); int64(got) != wantDead {
		e.t.Errorf("flowrun dlq list shows %d dead letters, want %d:\n%s", got, wantDead, r.stdout)
	}
	e.checkClean(r.stderr)
	return cfg
}

// redrive runs flowrun dlq redrive as flowrun-admin, granted the line of docs/acl.md label as well.
func (e *aclEnv) redrive(cfg, label string, want int) {
	e.t.Helper()
	e.grant(aclAdmin, []string{"flowrun inspect", "flowrun dlq list", label})
	r := flowrun(e.t, "", "dlq", "redrive", "jobs", cfg)
	if r.code != 0 {
		e.t.Fatalf("flowrun dlq redrive as %s exited %d:\n%s", aclAdmin, r.code, r.stderr)
	}
	if prefix := fmt.Sprintf("redrove %d dead letters", want); !strings.HasPrefix(r.stdout, prefix) {
		e.t.Errorf("flowrun dlq redrive printed %q, want %q…", r.stdout, prefix)
	}
	e.checkClean(r.stderr)
}

// TestACLStream: a stream source with a dead letter, durable delays and an emit to a stream,
// then inspect, dlq list and dlq redrive as an operator user.
func TestACLStream(t *testing.T) {
	e := newACLEnv(t)
	e.grant(aclUser, []string{`source "stream"`, "dead_letter, stream sources",
		`delayed_retry = "durable_zset"`, `emit "stream"`})
	source := "  source \"stream\" {\n    stream   = \"jobs\"\n    consumer = \"w1\"\n    block    = \"100ms\"\n  }"
	cfg := e.config("flow", aclUser, source, "  delayed_retry = \"durable_zset\"\n", aclRules("stream", "jobs.done"))
	e.xaddAll()
	p := start(t, "run", cfg)
	eventually(t, aclDeadline, "every message emitted or dead-lettered, nothing pending or delayed", func() bool {
		return e.xlen("jobs.done") == aclEmits && e.xlen("jobs.dlq") == aclDead && e.pending() == 0 &&
			e.admin.ZCard(e.ctx, "jobs:delayed").Val() == 0
	})
	aclStop(t, p)
	e.checkClean(p.err.String())
	e.checkCalled("zadd", "evalsha", "zrangebyscore") // the delay queue was used

	admin := e.inspectAndList(source, aclDead)
	e.redrive(admin, "flowrun dlq redrive, stream sources", aclDead)
	if n := e.xlen("jobs.dlq"); n != 0 {
		t.Errorf("XLEN jobs.dlq = %d after the redrive, want 0", n)
	}
}

// TestACLFlowControl: a stream pipeline with concurrency_key, a throttle that binds and dedupe
// (SPEC §13) runs as a user granted the source's lines and exactly the flow-control
// line: leases, claims and throttle windows under flowrun:{jobs}:, the scripts loaded by the
// user itself on a fresh server.
func TestACLFlowControl(t *testing.T) {
	e := newACLEnv(t)
	e.grant(aclUser, []string{`source "stream"`, "dead_letter, stream sources", `emit "stream"`,
		`concurrency_key, throttle, dedupe (pipeline "jobs")`})
	source := "  source \"stream\" {\n    stream   = \"jobs\"\n    consumer = \"w1\"\n    block    = \"100ms\"\n  }"
	blocks := `  concurrency_key {
    key   = "payload.k"
    limit = 1
  }
  throttle {
    limit  = 3
    period = "300ms"
  }
  dedupe {
    key    = "payload.n"
    window = "1h"
  }
`
	cfg := e.config("flow", aclUser, source, blocks, aclRules("stream", "jobs.done"))
	e.xaddAll()
	p := start(t, "run", cfg)
	eventually(t, aclDeadline, "every message emitted or dead-lettered, nothing pending", func() bool {
		return e.xlen("jobs.done") == aclEmits && e.xlen("jobs.dlq") == aclDead && e.pending() == 0
	})
	aclStop(t, p)
	e.checkClean(p.err.String())
	// The scripts were loaded, leases taken, claims kept and released, and the throttle's
	// window was full (LINDEX, RPOP) and moved on (LPOP).
	e.checkCalled("script|load", "evalsha", "zadd", "zrem", "rpush", "lindex", "rpop", "lpop", "set")
}

// TestACLClaiming: the claiming source of SPEC §10's list, with a dead letter and an emit to a
// stream. Retries and the delay stay pending and come back through XPENDING IDLE and XCLAIM.
func TestACLClaiming(t *testing.T) {
	e := newACLEnv(t)
	e.grant(aclUser, []string{`source "claiming"`, "dead_letter, stream sources", `emit "stream"`})
	source := "  source \"claiming\" {\n    stream   = \"jobs\"\n    consumer = \"w1\"\n    min_idle = \"300ms\"\n    block    = \"100ms\"\n  }"
	cfg := e.config("flow", aclUser, source, "", aclRulesDelay("stream", "jobs.done", aclLongDelay))
	e.xaddAll()
	p := start(t, "run", cfg)
	eventually(t, aclDeadline, "every message emitted or dead-lettered, nothing pending", func() bool {
		return e.xlen("jobs.done") == aclEmits && e.xlen("jobs.dlq") == aclDead && e.pending() == 0
	})
	aclStop(t, p)
	e.checkClean(p.err.String())
	e.checkCalled("evalsha", "eval", "xclaim") // the keep-alive script ran (EVAL: not cached yet)
	e.purge(e.config("admin", aclAdmin, source, "", aclRules("stream", "jobs.done")), "flowrun dlq purge, stream sources and pubsub", aclDead)
	if n := e.xlen("jobs.dlq"); n != 0 {
		t.Errorf("XLEN jobs.dlq = %d after the purge, want 0", n)
	}
}

// TestACLReclaim: the reclaim source (XAUTOCLAIM) with a dead letter and an emit to a list.
func TestACLReclaim(t *testing.T) {
	e := newACLEnv(t)
	e.grant(aclUser, []string{`source "reclaim"`, "dead_letter, stream sources", `emit "list"`})
	source := "  source \"reclaim\" {\n    stream   = \"jobs\"\n    consumer = \"w1\"\n    min_idle = \"300ms\"\n    block    = \"100ms\"\n  }"
	cfg := e.config("flow", aclUser, source, "", aclRulesDelay("list", "jobs.out", aclLongDelay))
	e.xaddAll()
	p := start(t, "run", cfg)
	eventually(t, aclDeadline, "every message emitted or dead-lettered, nothing pending", func() bool {
		return e.llen("jobs.out") == aclEmits && e.xlen("jobs.dlq") == aclDead && e.pending() == 0
	})
	aclStop(t, p)
	e.checkClean(p.err.String())
	e.checkCalled("evalsha", "xautoclaim", "xclaim") // the keep-alive script ran
}

// TestACLReliableList: a reliable list with a dead letter and an emit to a list; the processing
// list ends empty. Then inspect, dlq list and dlq redrive as an operator user.
func TestACLReliableList(t *testing.T) {
	e := newACLEnv(t)
	e.grant(aclUser, []string{`source "list", reliable`, "dead_letter, lists", `emit "list"`})
	source := "  source \"list\" {\n    key      = \"jobs\"\n    consumer = \"w1\"\n    block    = \"100ms\"\n  }"
	cfg := e.config("flow", aclUser, source, "", aclRules("list", "jobs.out"))
	e.lpushAll()
	p := start(t, "run", cfg)
	eventually(t, aclDeadline, "every message emitted or dead-lettered, the processing list empty", func() bool {
		return e.llen("jobs.out") == aclEmits && e.llen("jobs.dlq") == aclDead &&
			e.llen("jobs") == 0 && e.llen("jobs:processing:w1") == 0
	})
	aclStop(t, p)
	if els := e.admin.LRange(e.ctx, "jobs:processing:w1", 0, -1).Val(); len(els) != 0 {
		t.Errorf("processing list after the stop: %q, want empty", els)
	}
	e.checkClean(p.err.String())

	admin := e.inspectAndList(source, aclDead)
	e.redrive(admin, "flowrun dlq redrive, lists", aclDead)
	if n, m := e.llen("jobs.dlq"), e.llen("jobs"); n != 0 || m != aclDead {
		t.Errorf("after the redrive LLEN jobs.dlq = %d, LLEN jobs = %d; want 0 and %d", n, m, aclDead)
	}
}

// TestACLReliableListDurable: a reliable list with durable delays, a dead letter and an emit to
// a list, granted its source's line and the durable_zset line: the delay queue is used, and
// ends empty with the processing list.
func TestACLReliableListDurable(t *testing.T) {
	e := newACLEnv(t)
	e.grant(aclUser, []string{`source "list", reliable`, "dead_letter, lists", `delayed_retry = "durable_zset"`, `emit "list"`})
	source := "  source \"list\" {\n    key      = \"jobs\"\n    consumer = \"w1\"\n    block    = \"100ms\"\n  }"
	cfg := e.config("flow", aclUser, source, "  delayed_retry = \"durable_zset\"\n", aclRules("list", "jobs.out"))
	e.lpushAll()
	p := start(t, "run", cfg)
	eventually(t, aclDeadline, "every message emitted or dead-lettered, nothing processing or delayed", func() bool {
		return e.llen("jobs.out") == aclEmits && e.llen("jobs.dlq") == aclDead && e.llen("jobs") == 0 &&
			e.llen("jobs:processing:w1") == 0 && e.admin.ZCard(e.ctx, "jobs:delayed").Val() == 0
	})
	aclStop(t, p)
	e.checkClean(p.err.String())
	e.checkCalled("zadd", "evalsha", "zrangebyscore") // the delay queue was used
	admin := e.inspectAndList(source, aclDead)
	e.purge(admin, "flowrun dlq purge, lists", aclDead)
	if n := e.llen("jobs.dlq"); n != 0 {
		t.Errorf("LLEN jobs.dlq = %d after the purge, want 0", n)
	}
}

// TestACLSimpleList: a list with reliable = false (BRPOP), a dead letter and an emit to a list.
func TestACLSimpleList(t *testing.T) {
	e := newACLEnv(t)
	e.grant(aclUser, []string{`source "list", reliable = false`, "dead_letter, lists", `emit "list"`})
	source := "  source \"list\" {\n    key      = \"jobs\"\n    reliable = false\n    block    = \"100ms\"\n  }"
	cfg := e.config("flow", aclUser, source, "", aclRules("list", "jobs.out"))
	e.lpushAll()
	p := start(t, "run", cfg)
	eventually(t, aclDeadline, "every message emitted or dead-lettered, the list empty", func() bool {
		return e.llen("jobs.out") == aclEmits && e.llen("jobs.dlq") == aclDead && e.llen("jobs") == 0
	})
	aclStop(t, p)
	e.checkClean(p.err.String())
}

// TestACLPubSub: Pub/Sub with channels (a dead letter, an emit to a channel; then inspect, dlq
// list and a redrive to the running pipeline) and with patterns (retry_to, an emit to a stream).
func TestACLPubSub(t *testing.T) {
	t.Run("channels", func(t *testing.T) {
		e := newACLEnv(t)
		e.grant(aclUser, []string{`source "pubsub", channels`, "dead_letter, pubsub", `emit "pubsub"`})
		sub := e.admin.Subscribe(e.ctx, "jobs.events")
		t.Cleanup(func() { sub.Close() })
		if _, err := sub.Receive(e.ctx); err != nil {
			t.Fatal(err)
		}
		var heard atomic.Int64
		go func() {
			for range sub.Channel() {
				heard.Add(1)
			}
		}()
		source := "  source \"pubsub\" {\n    channels = [\"jobs\"]\n  }"
		cfg := e.config("flow", aclUser, source, "", aclRules("pubsub", "jobs.events"))
		p := start(t, "run", cfg)
		e.publishAll(p, "jobs", func() bool { return e.admin.PubSubNumSub(e.ctx, "jobs").Val()["jobs"] > 0 })
		eventually(t, aclDeadline, "every message emitted or dead-lettered", func() bool {
			return heard.Load() == aclEmits && e.xlen("jobs.dlq") == aclDead
		})

		// The redrive publishes to the running pipeline, whose rules dead-letter them again.
		admin := e.inspectAndList(source, aclDead)
		e.redrive(admin, "flowrun dlq redrive, pubsub", aclDead)
		eventually(t, aclDeadline, "the redriven letters dead-lettered again", func() bool {
			return e.xlen("jobs.dlq") == aclDead
		})
		aclStop(t, p)
		e.checkClean(p.err.String())
	})
	t.Run("patterns", func(t *testing.T) {
		e := newACLEnv(t)
		e.grant(aclUser, []string{`source "pubsub", patterns`, "dead_letter, pubsub", `emit "stream"`})
		source := "  source \"pubsub\" {\n    patterns = [\"jobs.*\"]\n  }"
		cfg := e.config("flow", aclUser, source, "  retry_to = \"jobs.retry\"\n", aclRules("stream", "jobs.done"))
		p := start(t, "run", cfg)
		e.publishAll(p, "jobs.in", func() bool { return e.admin.PubSubNumPat(e.ctx).Val() > 0 })
		eventually(t, aclDeadline, "every message emitted or dead-lettered", func() bool {
			return e.xlen("jobs.done") == aclEmits && e.xlen("jobs.dlq") == aclDead
		})
		aclStop(t, p)
		e.checkClean(p.err.String())
	})
}

// publishAll waits until flowrun has subscribed (subscribed), then publishes aclMessages to ch.
func (e *aclEnv) publishAll(p *proc, ch string, subscribed func() bool) {
	e.t.Helper()
	eventually(e.t, aclDeadline, "flowrun subscribed", func() bool {
		select {
		case <-p.done:
			e.t.Fatalf("flowrun exited %d before subscribing:\n%s", p.code, p.err.String())
		default:
		}
		return subscribed()
	})
	for _, m := range aclMessages {
		if err := e.admin.Publish(e.ctx, ch, m).Err(); err != nil {
			e.t.Fatalf("publish %s: %v", ch, err)
		}
	}
}

// aclCommandAndKey matches a log line that names the refused command and the dead-letter key.
var aclCommandAndKey = regexp.MustCompile(`(?i)\b(xadd|evalsha|eval)\b.*jobs\.dlq|jobs\.dlq.*\b(xadd|evalsha|eval)\b`)

// TestACLDeadLetterNotWritable: the user may read the dead-letter stream but not write it
// (SPEC §10 "Settlement failures"). The dead letter that cannot be written is a permanent
// settlement failure: logged at error once, naming the command, the key and Redis's NOPERM; that
// delivery stays pending (never acknowledged without its dead letter, never lost), while every
// other delivery goes on being acknowledged. Once the grant is fixed, the dead letter lands at
// its next delivery, without a restart.
func TestACLDeadLetterNotWritable(t *testing.T) {
	e := newACLEnv(t)
	dl := e.rules("dead_letter, stream sources")
	for i, r := range dl {
		if r == "~jobs.dlq" {
			dl[i] = "%R~jobs.dlq" // read, not write
		}
	}
	e.grant(aclUser, []string{`source "claiming"`, `emit "stream"`}, dl...)
	source := "  source \"claiming\" {\n    stream   = \"jobs\"\n    consumer = \"w1\"\n    min_idle = \"300ms\"\n    block    = \"100ms\"\n  }"
	cfg := e.config("flow", aclUser, source, "", aclRules("stream", "jobs.done"))
	p := start(t, "run", cfg)

	dead, err := e.admin.XAdd(e.ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"payload", `{"k":"dead"}`}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, aclDeadline, "Redis refusing the dead letter's write", func() bool {
		return len(e.denials()) > 0
	})
	for _, m := range []string{`{"n":1,"k":"ok"}`, `{"n":2,"k":"again"}`, `{"n":3,"k":"ok"}`} {
		if err := e.admin.XAdd(e.ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"payload", m}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The other deliveries are acknowledged: only the dead one is left pending.
	eventually(t, aclDeadline, "every other delivery emitted and acknowledged", func() bool {
		return e.xlen("jobs.done") == 3 && e.pending() == 1
	})
	ext, err := e.admin.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "jobs", Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(ext) != 1 || ext[0].ID != dead {
		t.Fatalf("pending entries %+v (%v), want only %s", ext, err, dead)
	}
	if n := e.xlen("jobs.dlq"); n != 0 {
		t.Errorf("XLEN jobs.dlq = %d, want 0: the user cannot write it", n)
	}
	if xs := e.admin.XRange(e.ctx, "jobs", dead, dead).Val(); len(xs) != 1 {
		t.Errorf("entry %s is gone from the stream: %v", dead, xs)
	}

	// It comes back by the claiming rules (min_idle) and fails again, logged only once.
	eventually(t, aclDeadline, "the dead delivery claimed again", func() bool {
		ext, err := e.admin.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "jobs", Start: dead, End: dead, Count: 1}).Result()
		return err == nil && len(ext) == 1 && ext[0].RetryCount >= 4
	})
	var errs []string
	for _, l := range strings.Split(p.err.String(), "\n") {
		if strings.Contains(l, `"level":"error"`) && strings.Contains(l, "NOPERM") {
			errs = append(errs, l)
		}
	}
	switch {
	case len(errs) == 0:
		t.Errorf("no error line with Redis's NOPERM; stderr:\n%s", p.err.String())
	case len(errs) > 1:
		t.Errorf("the failure was logged at error %d times, want once per pipeline, command, key and reason:\n%s",
			len(errs), strings.Join(errs, "\n"))
	}
	if len(errs) > 0 && !aclCommandAndKey.MatchString(errs[0]) {
		t.Errorf("the error line does not name the command (xadd, evalsha or eval) and the key jobs.dlq:\n%s", errs[0])
	}
	if strings.Contains(p.err.String(), "EXECABORT") {
		t.Errorf("a generic EXECABORT was logged instead of the command at fault:\n%s", aclGrep(p.err.String(), "EXECABORT"))
	}

	// Fixed while running: the next delivery writes the dead letter and acknowledges it.
	if err := e.admin.ACLSetUser(e.ctx, aclUser, "~jobs.dlq").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, aclDeadline, "the dead letter written once the grant is fixed", func() bool {
		return e.xlen("jobs.dlq") == 1 && e.pending() == 0
	})
	if xs := e.admin.XRange(e.ctx, "jobs.dlq", "-", "+").Val(); len(xs) == 1 && xs[0].Values["x-original-id"] != dead {
		t.Errorf("dead letter's x-original-id = %v, want %s", xs[0].Values["x-original-id"], dead)
	}
	aclStop(t, p)

	// Nothing but the dead letter's key was refused.
	entries, err := e.admin.ACLLog(e.ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range entries {
		if x.Object != "jobs.dlq" && !evictionCheck(x) {
			t.Errorf("Redis refused %s %q (context %s) too: not in the lines of docs/acl.md", x.Reason, x.Object, x.Context)
		}
	}
}

// TestACLSchedule: a schedule source with catch_up (GET at start, the take script each tick),
// retry copies held in the process, dead letters and an emit to a stream, run as a user granted
// exactly the lines of docs/acl.md.
func TestACLSchedule(t *testing.T) {
	e := newACLEnv(t)
	e.grant(aclUser, []string{`source "schedule"`, "dead_letter, schedule", `emit "stream"`})
	source := "  source \"schedule\" {\n    every    = \"1s\"\n    catch_up = \"1m\"\n  }"
	rules := `  rule "even" {
    when    = "payload.scheduled_at matches '[02468]Z$'"
    outcome = "retry"
  }
  rule "odd" {
    when    = "attempt < 2"
    outcome = "retry"
  }
  rule "done" {
    emit "stream" {
      key = "jobs.done"
    }
    outcome = "ack"
  }
`
	cfg := e.config("flow", aclUser, source, "", rules)
	p := start(t, "run", cfg)
	eventually(t, aclDeadline, "odd ticks emitted after a retry, even ones dead-lettered", func() bool {
		return e.xlen("jobs.done") >= 2 && e.xlen("jobs.dlq") >= 2
	})
	aclStop(t, p)
	if last, err := e.admin.Get(e.ctx, "flowrun:schedule:{jobs}:last").Result(); err != nil || last == "" {
		t.Errorf("last tick %q (%v), want one", last, err)
	}
	e.checkClean(p.err.String())
}
