package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFingerprint checks what changes a pipeline's fingerprint (a reload restarts it) and what
// does not.
func TestFingerprint(t *testing.T) {
	const base = `
redis "a" { url = "redis://127.0.0.1:1" }
redis "b" { url = "redis://127.0.0.1:2" }

pipeline "p" {
  source "stream" {
    redis  = "a"
    stream = "in"
    group  = "g"
  }
  rule "r" {
    when    = "true"
    outcome = "ack"
    emit "stream" {
      redis   = "b"
      key     = "out"
      payload = env("FP_PAYLOAD", "'x'")
    }
  }
}

pipeline "q" {
  source "stream" {
    redis  = "a"
    stream = "in2"
    group  = "g"
  }
  rule "r" {
    when    = "true"
    outcome = file("outcome.txt")
  }
}
`
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "outcome.txt"), []byte("ack"), 0o644)
	load := func(src string) (p, q *Pipeline) {
		t.Helper()
		path := filepath.Join(dir, "f.hcl")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := mustLoad(t, path)
		return cfg.Pipeline("p"), cfg.Pipeline("q")
	}
	p0, q0 := load(base)
	if got := p0.RedisBlocks(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("p uses %v, want [a b]", got)
	}
	if got := q0.RedisBlocks(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("q uses %v, want [a]", got)
	}
	if p0.Fingerprint() == "" || p0.Fingerprint() == q0.Fingerprint() {
		t.Fatalf("fingerprints %q %q", p0.Fingerprint(), q0.Fingerprint())
	}
	same := func(what string, src string, wantP, wantQ bool) {
		t.Helper()
		p, q := load(src)
		if got := p.Fingerprint() == p0.Fingerprint(); got != wantP {
			t.Errorf("%s: p unchanged %v, want %v", what, got, wantP)
		}
		if got := q.Fingerprint() == q0.Fingerprint(); got != wantQ {
			t.Errorf("%s: q unchanged %v, want %v", what, got, wantQ)
		}
	}
	same("reloaded as is", base, true, true)
	same("comments and layout", "# new comment\n"+replace(base, `stream = "in"`, "stream =    \"in\" // same\n\n"), true, true)
	same("an attribute", replace(base, `stream = "in"`, `stream = "in3"`), false, true)
	same("an emit's redis block", replace(base, "127.0.0.1:2", "127.0.0.1:3"), false, true)
	same("the source's redis block", replace(base, "127.0.0.1:1", "127.0.0.1:3"), false, false)
	same("a block moved", replace(base, `redis "b" { url = "redis://127.0.0.1:2" }`, "")+`redis "b" { url = "redis://127.0.0.1:2" }`, true, true)

	t.Setenv("FP_PAYLOAD", "'y'")
	same("an env() value", base, false, true)
	t.Setenv("FP_PAYLOAD", "'x'") // the default's value, but set: the same effective config
	same("env() set to its default", base, true, true)
	os.WriteFile(filepath.Join(dir, "outcome.txt"), []byte("drop"), 0o644)
	same("a file() content", base, true, false)
}

func replace(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic("no " + old)
	}
	return strings.Replace(s, old, new, 1)
}
