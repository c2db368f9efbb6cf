package builtin

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports"
)

// Every built-in kind's Capabilities, known at load time, are those of the source it builds.
func TestCapabilitiesAtLoadMatchTheSource(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	src := `redis "main" {
  url = "redis://127.0.0.1:1"
}
`
	for name, body := range map[string]string{
		"stream":  `source "stream" { stream = "s" }`,
		"durable": "source \"stream\" {\n stream = \"s\"\n batch = 7\n}\ndelayed_retry = \"durable_zset\"",
		"claim":   "source \"claiming\" {\n stream = \"s\"\n min_idle = \"30s\"\n}",
		"reclaim": "source \"reclaim\" {\n stream = \"s\"\n min_idle = \"1m\"\n}",
		"list":    `source "list" { key = "k" }`,
		"simple":  "source \"list\" {\n key = \"k\"\n reliable = false\n}",
		"pubsub":  `source "pubsub" { channels = ["c"] }`,
		"file":    `source "file" { path = "in.jsonl" }`,
		"pipe":    "source \"pipe\" {}\nout_retry = \"again\"",
		"tick":    `source "schedule" { every = "1m" }`,
	} {
		src += "pipeline \"" + name + "\" {\n" + body + "\nrule \"r\" {\n outcome = \"ack\"\n}\n}\n"
	}
	path := filepath.Join(dir, "flow.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load([]string{path}, config.Options{Hostname: "h"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled here
	defer client.Close()
	kinds := map[string]bool{}
	for _, p := range cfg.Pipelines {
		kinds[p.Source.Kind] = true
		env := &transports.Env{
			Logger:     zerolog.Nop(),
			Stdin:      strings.NewReader(""),
			Stdout:     codec.NewLineWriter(io.Discard),
			RedisBlock: p.Source.Redis,
			Redis:      func(string) (redis.UniversalClient, error) { return client, nil },
			OnClose:    func(func() error) {},
		}
		s, err := p.Source.Config.Build(t.Context(), env)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if got, want := p.Source.Config.Capabilities(), s.Capabilities(); got != want {
			t.Errorf("%s: load-time capabilities %+v, the source declares %+v", p.Name, got, want)
		}
		s.Close()
	}
	for _, k := range transports.Kinds() {
		if !kinds[k.Name] {
			t.Errorf("source kind %q is not covered", k.Name)
		}
	}
}
