package config

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

func TestHashTag(t *testing.T) {
	for _, tc := range []struct {
		key, tag string
		ok       bool
	}{
		{"jobs", "", false},
		{"{a}jobs", "a", true},
		{"jobs{a}", "a", true},
		{"{}jobs", "", false},     // empty: the whole key is hashed
		{"foo{}{bar}", "", false}, // only the first '{' counts
		{"foo{{bar}}zap", "{bar", true},
		{"foo{bar}{zap}", "bar", true},
		{"{jobs", "", false},
		{"jobs}", "", false},
	} {
		tag, ok := hashTag(tc.key)
		if tag != tc.tag || ok != tc.ok {
			t.Errorf("hashTag(%q) = %q, %v; want %q, %v", tc.key, tag, ok, tc.tag, tc.ok)
		}
	}
}

func TestKeySlotKnown(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, slot := range map[string]int{"foo": 12182, "bar": 5061, "hello": 866, "somekey": 11058, "{foo}jobs": 12182, "": 0} {
		if got := keySlot(key); got != slot {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, slot)
		}
	}
}

// keySlot agrees with a real Redis Cluster node on random keys, braces included.
func TestKeySlotMatchesRedis(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ab{}:x"
	for i := range 500 {
		var b strings.Builder
		for range r.IntN(10) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		key := b.String()
		if i < 3 {
			key = []string{"{a}jobs", "jobs:delayed", "{{a}jobs}"}[i]
		}
		want, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(key); int64(got) != want {
			t.Fatalf("keySlot(%q) = %d, Redis says %d", key, got, want)
		}
	}
}

// Every suggestion hashes as it should: the dependent key in the main key's slot, with a tag.
func TestSuggestionsShareTheSlot(t *testing.T) {
	keys := []string{"jobs", "{a}jobs", "jobs{a}", "{{a}jobs}", "x{b}y", "{}x", "a}b", "jo{bs", "j"}
	for _, main := range keys {
		for _, dep := range append(keys, main+":delayed", main+":processing:host1", "later", "{c}later") {
			if tag, ok := hashTag(main); ok {
				s := retag(dep, tag)
				if got, _ := hashTag(s); got != tag || keySlot(s) != keySlot(main) {
					t.Errorf("retag(%q, %q) = %q: tag %q, want %q", dep, tag, s, got, tag)
				}
				continue
			}
			newMain, newDep, ok := tagBoth(main, dep)
			if !ok {
				if !strings.ContainsAny(main, "{}") {
					t.Errorf("tagBoth(%q, %q): no suggestion", main, dep)
				}
				continue
			}
			t1, ok1 := hashTag(newMain)
			t2, ok2 := hashTag(newDep)
			if !ok1 || !ok2 || t1 != t2 || t1 != main {
				t.Errorf("tagBoth(%q, %q) = %q, %q: tags %q, %q", main, dep, newMain, newDep, t1, t2)
			}
		}
	}
	if m, d, _ := tagBoth("jobs", "jobs:delayed"); m != "{jobs}" || d != "{jobs}:delayed" {
		t.Errorf("tagBoth(jobs) = %q, %q", m, d)
	}
	if s := retag("jobs:delayed", "a"); s != "{a}jobs:delayed" {
		t.Errorf("retag = %q", s)
	}
	if s := retag("{b}jobs:delayed", "a"); s != "{a}jobs:delayed" {
		t.Errorf("retag = %q", s)
	}
}

// The checks follow the redis block: only a cluster block's pipelines are checked.
func TestClusterSlotsOnlyOnCluster(t *testing.T) {
	for _, tc := range []struct {
		redis, source, extra string
		bad                  bool
	}{
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "jobs" }`, `delayed_retry = "durable_zset"`, true},
		{`url = "redis://127.0.0.1:6379"`, `source "stream" { stream = "jobs" }`, `delayed_retry = "durable_zset"`, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "{jobs}" }`, `delayed_retry = "durable_zset"`, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "jobs" }`, ``, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "list" { key = "jobs" }`, ``, true},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"jobs\"\n reliable = false\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n processing = \"{q}p\"\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n processing = \"q:p\"\n}", ``, true},
	} {
		src := fmt.Sprintf("redis \"r\" {\n  %s\n}\npipeline \"p\" {\n  %s\n  %s\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n", tc.redis, tc.source, tc.extra)
		path := writeTemp(t, src)
		_, diags := Load([]string{path}, Options{Hostname: "host1"})
		if diags.HasErrors() != tc.bad {
			t.Errorf("%s / %s / %s: errors %v, want %v: %v", tc.redis, tc.source, tc.extra, diags.HasErrors(), tc.bad, diags)
		}
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := t.TempDir() + "/c.hcl"
	write(t, path, content)
	return path
}
