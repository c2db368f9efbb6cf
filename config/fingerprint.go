package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Fingerprints tell a reload (SPEC §10 "Reload") which pipelines changed. A pipeline's is a hash
// of everything its effective configuration comes from: the tokens of its block (comments and
// layout left out, so reformatting or commenting restarts nothing), the folder relative paths
// resolve against, the consumer name default, the values env() and file() returned while it was
// decoded, and the same for every redis block it uses (plus the contents of their TLS files, so
// a rotated certificate takes effect on SIGHUP).

// inputRecorder collects the values env() and file() return while one block is decoded.
type inputRecorder struct {
	cur hash.Hash // nil between blocks
}

func (r *inputRecorder) add(fn, arg, value string) {
	if r == nil || r.cur == nil {
		return
	}
	fmt.Fprintf(r.cur, "%s(%q)=%d:%s\n", fn, arg, len(value), value)
}

// fingerprintBlock decodes block with decode and returns the hash of its tokens, the file's
// context and the function values decode saw.
func (d *fileDecoder) fingerprintBlock(block *hcl.Block, decode func()) string {
	h := sha256.New()
	fmt.Fprintf(h, "dir=%q consumer=%q override=%t\n", d.dir, d.consumer, d.override)
	writeTokens(h, d.src, block)
	prev := d.rec.cur
	d.rec.cur = h
	decode()
	d.rec.cur = prev
	return hex.EncodeToString(h.Sum(nil))
}

// writeTokens writes the tokens of block's source text, without comments and with runs of
// newlines as one.
func writeTokens(h hash.Hash, src []byte, block *hcl.Block) {
	start, end := block.DefRange.Start.Byte, block.DefRange.End.Byte
	if b, ok := block.Body.(*hclsyntax.Body); ok {
		end = b.SrcRange.End.Byte
	}
	if start < 0 || end > len(src) || start > end {
		fmt.Fprintf(h, "range=%v\n", block.DefRange)
		return
	}
	toks, _ := hclsyntax.LexConfig(src[start:end], block.DefRange.Filename, block.DefRange.Start)
	newline := false
	for _, t := range toks {
		switch t.Type {
		case hclsyntax.TokenComment:
			continue
		case hclsyntax.TokenNewline:
			if newline {
				continue
			}
			newline = true
		default:
			newline = false
		}
		fmt.Fprintf(h, "%d:%d:%s\n", t.Type, len(t.Bytes), t.Bytes)
	}
}

// Fingerprint is a hash of the pipeline's effective configuration, its redis blocks included:
// two loads give the same fingerprint exactly when the pipeline would run the same.
func (p *Pipeline) Fingerprint() string { return p.fingerprint }

// RedisBlocks names the redis blocks the pipeline uses (its source's, its emits', its Go
// handler's), sorted.
func (p *Pipeline) RedisBlocks() []string { return p.redisBlocks }

// Fingerprint is a hash of the redis block's configuration and its TLS files' contents.
func (r *Redis) Fingerprint() string { return r.fingerprint }

// finishFingerprints sets, once references are resolved, the pipeline's redis blocks and its
// fingerprint over its own and theirs.
func (cfg *Config) finishFingerprints() {
	for _, r := range cfg.Redis {
		h := sha256.New()
		h.Write([]byte(r.fingerprint))
		if t := r.TLS; t != nil {
			for _, f := range []string{t.CAFile, t.CertFile, t.KeyFile} {
				if f == "" {
					continue
				}
				b, err := os.ReadFile(f)
				fmt.Fprintf(h, "tls %q err=%v %x\n", f, err != nil, sha256.Sum256(b))
			}
		}
		r.fingerprint = hex.EncodeToString(h.Sum(nil))
	}
	for _, w := range cfg.Workflows {
		cfg.finishWorkflowFingerprint(w)
	}
	for _, pl := range cfg.Pipelines {
		used := map[string]bool{}
		if pl.Source != nil && pl.Source.Redis != "" {
			used[pl.Source.Redis] = true
		}
		if pl.Rules != nil {
			for _, r := range pl.Rules.Rules {
				for _, e := range r.Emits {
					if e.Target.Redis != "" {
						used[e.Target.Redis] = true
					}
				}
			}
		}
		if pl.Handler != nil && (pl.Source == nil || pl.Source.Redis == "") && len(cfg.Redis) == 1 {
			used[cfg.Redis[0].Name] = true // a Go handler's emits default to the only block
		}
		pl.redisBlocks = pl.redisBlocks[:0]
		for n := range used {
			pl.redisBlocks = append(pl.redisBlocks, n)
		}
		sort.Strings(pl.redisBlocks)
		h := sha256.New()
		h.Write([]byte(pl.fingerprint))
		for _, n := range pl.redisBlocks {
			fp := ""
			if r := cfg.RedisBlock(n); r != nil {
				fp = r.fingerprint
			}
			fmt.Fprintf(h, "redis %q %s\n", n, fp)
		}
		pl.fingerprint = hex.EncodeToString(h.Sum(nil))
	}
}

// finishWorkflowFingerprint sets the workflow's redis blocks and its fingerprint over its own
// and theirs, and gives its start and step pipelines the same: a change anywhere in the block
// restarts the whole workflow.
func (cfg *Config) finishWorkflowFingerprint(w *Workflow) {
	used := map[string]bool{}
	if w.Redis != "" {
		used[w.Redis] = true
	}
	if src := w.Start.sourceOrNil(); src != nil && src.Redis != "" {
		used[src.Redis] = true
	}
	for _, s := range w.Steps {
		if s.Wait != nil && s.Wait.Source != nil && s.Wait.Source.Redis != "" {
			used[s.Wait.Source.Redis] = true
		}
		if s.Pipeline.Rules == nil {
			continue
		}
		for _, r := range s.Pipeline.Rules.Rules {
			for _, e := range r.Emits {
				if e.Target.Redis != "" {
					used[e.Target.Redis] = true
				}
			}
		}
	}
	w.redisBlocks = w.redisBlocks[:0]
	for n := range used {
		w.redisBlocks = append(w.redisBlocks, n)
	}
	sort.Strings(w.redisBlocks)
	h := sha256.New()
	h.Write([]byte(w.fingerprint))
	for _, n := range w.redisBlocks {
		fp := ""
		if r := cfg.RedisBlock(n); r != nil {
			fp = r.fingerprint
		}
		fmt.Fprintf(h, "redis %q %s\n", n, fp)
	}
	w.fingerprint = hex.EncodeToString(h.Sum(nil))
	for _, pl := range w.Pipelines() {
		pl.fingerprint, pl.redisBlocks = w.fingerprint, w.redisBlocks
	}
}
