package keyslot

import (
	"context"
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
		tag, ok := HashTag(tc.key)
		if tag != tc.tag || ok != tc.ok {
			t.Errorf("HashTag(%q) = %q, %v; want %q, %v", tc.key, tag, ok, tc.tag, tc.ok)
		}
	}
}

func TestKeySlotKnown(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, slot := range map[string]int{"foo": 12182, "bar": 5061, "hello": 866, "somekey": 11058, "{foo}jobs": 12182, "": 0} {
		if got := Of(key); got != slot {
			t.Errorf("Of(%q) = %d, want %d", key, got, slot)
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
		if got := Of(key); int64(got) != want {
			t.Fatalf("Of(%q) = %d, Redis says %d", key, got, want)
		}
	}
}

// Every suggestion hashes as it should: the dependent key in the main key's slot, with a tag.
func TestSuggestionsShareTheSlot(t *testing.T) {
	keys := []string{"jobs", "{a}jobs", "jobs{a}", "{{a}jobs}", "x{b}y", "{}x", "a}b", "jo{bs", "j"}
	for _, main := range keys {
		for _, dep := range append(keys, main+":delayed", main+":processing:host1", "later", "{c}later") {
			if tag, ok := HashTag(main); ok {
				s := Retag(dep, tag)
				if got, _ := HashTag(s); got != tag || Of(s) != Of(main) {
					t.Errorf("Retag(%q, %q) = %q: tag %q, want %q", dep, tag, s, got, tag)
				}
				continue
			}
			newMain, newDep, ok := TagBoth(main, dep)
			if !ok {
				if !strings.ContainsAny(main, "{}") {
					t.Errorf("TagBoth(%q, %q): no suggestion", main, dep)
				}
				continue
			}
			t1, ok1 := HashTag(newMain)
			t2, ok2 := HashTag(newDep)
			if !ok1 || !ok2 || t1 != t2 || t1 != main {
				t.Errorf("TagBoth(%q, %q) = %q, %q: tags %q, %q", main, dep, newMain, newDep, t1, t2)
			}
		}
	}
	if m, d, _ := TagBoth("jobs", "jobs:delayed"); m != "{jobs}" || d != "{jobs}:delayed" {
		t.Errorf("TagBoth(jobs) = %q, %q", m, d)
	}
	if s := Retag("jobs:delayed", "a"); s != "{a}jobs:delayed" {
		t.Errorf("Retag = %q", s)
	}
	if s := Retag("{b}jobs:delayed", "a"); s != "{a}jobs:delayed" {
		t.Errorf("Retag = %q", s)
	}
}
