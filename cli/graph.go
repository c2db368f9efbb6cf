package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports"
)

// cmdGraph is `flowrun graph [--format mermaid|dot] [PATH...]` (SPEC §1): the topology of the
// pipelines, loaded as validate loads them and without connecting anywhere.
func cmdGraph(args []string, stdio Stdio) int {
	fs := newFlagSet("graph", stdio)
	format := fs.String("format", "mermaid", "mermaid or dot")
	paths, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if *format != "mermaid" && *format != "dot" {
		fmt.Fprintf(stdio.Err, "flowrun graph: unknown --format %q; use mermaid or dot\n", *format)
		return ExitConfig
	}
	cfg := load(paths, config.Options{}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	g := buildGraph(cfg.Pipelines, cfg.Workflows...)
	if *format == "dot" {
		g.writeDOT(stdio.Out)
	} else {
		g.writeMermaid(stdio.Out)
	}
	return ExitOK
}

// graph is the topology: pipelines and the keys they read and write, as nodes, and the edges
// between them. A key node is shared by every pipeline that names the key, so where one
// pipeline's emits, retry copies or dead letters go to another's source, the two are linked
// through that key: a --> key --> b.
type graph struct {
	nodes     []graphNode // pipelines in name order, then keys in name order
	edges     []graphEdge // per pipeline in name order: source, emits, retry, dead letter
	workflows []*workflowGraph

	used map[string]bool // node ids taken
	keys map[graphKey]string
}

type graphNode struct {
	id, label string
	pipeline  bool
	shape     nodeShape // a workflow's nodes only
}

type graphEdge struct {
	from, to, label string
	dashed          bool // a workflow's timeouts and compensations
}

// newID returns an id made of prefix and name that no node has yet.
func (g *graph) newID(prefix, name string) string {
	base := prefix + sanitizeID(name)
	id := base
	for n := 2; g.used[id]; n++ {
		id = fmt.Sprintf("%s_%d", base, n)
	}
	g.used[id] = true
	return id
}

// buildGraph draws the pipelines, and each workflow as a state diagram of its own whose start
// is fed by its start source's key node (shared with the pipelines).
func buildGraph(pipelines []*config.Pipeline, workflows ...*config.Workflow) *graph {
	ps := append([]*config.Pipeline(nil), pipelines...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })

	g := &graph{used: map[string]bool{}, keys: map[graphKey]string{}}
	newID := g.newID
	pid := map[string]string{}
	for _, p := range ps {
		pid[p.Name] = newID("p_", p.Name)
		g.nodes = append(g.nodes, graphNode{id: pid[p.Name], label: p.Name, pipeline: true})
	}
	// keys, collected first so that their ids and order do not depend on the pipelines' order
	keySet := map[graphKey]bool{}
	for _, p := range ps {
		for _, k := range pipelineKeys(p) {
			keySet[k] = true
		}
	}
	for _, w := range workflows {
		if k, ok := sourceKey(w.Start); ok {
			keySet[k] = true
		}
		for _, k := range waitKeys(w) {
			keySet[k] = true
		}
	}
	keys := make([]graphKey, 0, len(keySet))
	for k := range keySet {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].name != keys[j].name {
			return keys[i].name < keys[j].name
		}
		return !keys[i].records && keys[j].records
	})
	kid := g.keys
	for _, k := range keys {
		if k.records {
			kid[k] = newID("r_", k.name)
			g.nodes = append(g.nodes, graphNode{id: kid[k], label: k.name + " (records)"})
		} else {
			kid[k] = newID("k_", k.name)
			g.nodes = append(g.nodes, graphNode{id: kid[k], label: k.name})
		}
	}

	seen := map[graphEdge]bool{}
	add := func(e graphEdge) {
		if !seen[e] {
			seen[e] = true
			g.edges = append(g.edges, e)
		}
	}
	for _, p := range ps {
		id := pid[p.Name]
		if p.Source != nil {
			if k, ok := sourceKey(p); ok {
				add(graphEdge{from: kid[k], to: id, label: p.Source.Kind})
			} else {
				// a source without one key (several channels): a node of its own
				sid := newID("s_", p.Name)
				g.nodes = append(g.nodes, graphNode{id: sid, label: p.Source.Kind})
				add(graphEdge{from: sid, to: id, label: p.Source.Kind})
			}
		}
		for _, o := range outputs(p) {
			add(graphEdge{from: id, to: kid[o.key], label: o.label})
		}
	}
	g.addWorkflows(workflows)
	return g
}

// graphKey is a key node: a Redis key, or a key of records (a file, standard input or output).
// The same name in Redis and in records are different nodes.
type graphKey struct {
	name    string
	records bool
}

type graphOutput struct {
	key   graphKey
	label string
}

// sourceKey is the key p reads; false when its source has no single key, or reads none (a
// schedule's clock).
func sourceKey(p *config.Pipeline) (graphKey, bool) {
	if p.Source == nil || p.Source.NaturalKey() == "" {
		return graphKey{}, false
	}
	if _, clock := p.Source.Config.(transports.Ticker); clock {
		return graphKey{}, false
	}
	return graphKey{p.Source.NaturalKey(), p.Source.Redis == ""}, true
}

// outputs lists where p writes: its rules' emits in order, its retry target, its dead letter.
func outputs(p *config.Pipeline) []graphOutput {
	var out []graphOutput
	if p.Rules != nil {
		for _, r := range p.Rules.Rules {
			for _, e := range r.Emits {
				if e.Key != "" {
					out = append(out, graphOutput{graphKey{e.Key, e.Target.Redis == ""}, "emit " + e.Target.Kind})
				}
			}
		}
	}
	if k := retryTarget(p); k != "" {
		out = append(out, graphOutput{graphKey{k, false}, "retry"})
	}
	if p.DeadLetter != "" {
		out = append(out, graphOutput{graphKey{p.DeadLetter, p.Source != nil && p.Source.Redis == ""}, "dead letter"})
	}
	return out
}

// pipelineKeys lists every key p reads or writes.
func pipelineKeys(p *config.Pipeline) []graphKey {
	var ks []graphKey
	if k, ok := sourceKey(p); ok {
		ks = append(ks, k)
	}
	for _, o := range outputs(p) {
		ks = append(ks, o.key)
	}
	return ks
}

// retryTarget is where p's retry copies go when that is not its source ("" otherwise).
func retryTarget(p *config.Pipeline) string {
	if p.Source == nil {
		return ""
	}
	if rt, ok := p.Source.Config.(transports.RetryTargeter); ok {
		if k := rt.RetryTarget(); k != p.Source.NaturalKey() {
			return k
		}
	}
	return ""
}

// sanitizeID keeps letters, digits and underscores, so that an id needs no quoting in Mermaid.
func sanitizeID(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 128 && (r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// writeMermaid prints a Mermaid flowchart: pipelines as boxes, keys as cylinders.
func (g *graph) writeMermaid(w io.Writer) {
	q := func(s string) string {
		return `"` + strings.NewReplacer(`"`, "#quot;", "\n", " ").Replace(s) + `"`
	}
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	for _, n := range g.nodes {
		if n.pipeline {
			fmt.Fprintf(&b, "  %s[%s]\n", n.id, q(n.label))
		} else {
			fmt.Fprintf(&b, "  %s[(%s)]\n", n.id, q(n.label))
		}
	}
	for _, e := range g.edges {
		fmt.Fprintf(&b, "  %s -->|%s| %s\n", e.from, q(e.label), e.to)
	}
	g.mermaidWorkflows(&b, q)
	io.WriteString(w, b.String())
}

// writeDOT prints a Graphviz digraph: pipelines as boxes, keys as cylinders.
func (g *graph) writeDOT(w io.Writer) {
	q := func(s string) string {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
	}
	var b strings.Builder
	b.WriteString("digraph flowrun {\n  rankdir=LR;\n")
	for _, n := range g.nodes {
		shape := "cylinder"
		if n.pipeline {
			shape = "box"
		}
		fmt.Fprintf(&b, "  %s [label=%s, shape=%s];\n", q(n.id), q(n.label), shape)
	}
	for _, e := range g.edges {
		fmt.Fprintf(&b, "  %s -> %s [label=%s];\n", q(e.from), q(e.to), q(e.label))
	}
	g.dotWorkflows(&b, q)
	b.WriteString("}\n")
	io.WriteString(w, b.String())
}
