package cli

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/flowrun/flowrun/config"
)

// nodeShape is how a workflow's node is drawn.
type nodeShape int

const (
	shapeStep   nodeShape = iota + 1 // a step with a handler
	shapeChoice                      // a step whose rules choose the way on
	shapeStart                       // where runs start
	shapeEnd                         // completed, failed
)

// workflowGraph is one workflow as a state diagram (SPEC §16 graph): its start, a state per step
// and the ends a run reaches; its edges are next (plain), a rule's next, complete or fail
// (labelled with the rule), on_timeout and compensate (dashed, labelled).
type workflowGraph struct {
	id, label string
	nodes     []graphNode
	edges     []graphEdge // the start source's key to the start first, then per step in order
}

// addWorkflows draws each workflow, in name order.
func (g *graph) addWorkflows(workflows []*config.Workflow) {
	ws := append([]*config.Workflow(nil), workflows...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	for _, w := range ws {
		g.workflows = append(g.workflows, g.drawWorkflow(w))
	}
}

func (g *graph) drawWorkflow(w *config.Workflow) *workflowGraph {
	wg := &workflowGraph{id: g.newID("w_", w.Name), label: "workflow " + w.Name}
	start := g.newID("w_", w.Name+"_start")
	wg.nodes = append(wg.nodes, graphNode{id: start, label: "start", shape: shapeStart})
	if w.Start != nil && w.Start.Source != nil {
		if k, ok := sourceKey(w.Start); ok {
			wg.edges = append(wg.edges, graphEdge{from: g.keys[k], to: start, label: w.Start.Source.Kind})
		}
	}
	sid := map[string]string{}
	for _, s := range w.Steps {
		sid[s.Name] = g.newID("w_", w.Name+"_"+s.Name)
		n := graphNode{id: sid[s.Name], label: stepLabel(s), shape: shapeStep}
		if chooses(s) {
			n.shape = shapeChoice
		}
		if s.Wait != nil {
			n.label = "wait " + n.label
		}
		wg.nodes = append(wg.nodes, n)
	}
	var ends []string // "completed", "failed", in the order first needed
	endID := map[string]string{}
	end := func(name string) string {
		if endID[name] == "" {
			endID[name] = g.newID("w_", w.Name+"_"+name)
			ends = append(ends, name)
		}
		return endID[name]
	}
	if len(w.Steps) > 0 {
		wg.edges = append(wg.edges, graphEdge{from: start, to: sid[w.Steps[0].Name]})
	}
	wg.edges = append(wg.edges, g.waitEdges(w, sid)...)
	undo := compensationsOnly(w)
	for _, s := range w.Steps {
		wg.edges = append(wg.edges, stepEdges(s, sid, end, undo[s.Name])...)
	}
	for _, name := range ends {
		wg.nodes = append(wg.nodes, graphNode{id: endID[name], label: name, shape: shapeEnd})
	}
	return wg
}

// compensationsOnly is the set of steps a run enters only to compensate: named by compensate,
// and not by the first step's place, a next, a rule's next or an on_timeout.
func compensationsOnly(w *config.Workflow) map[string]bool {
	forward := map[string]bool{}
	if len(w.Steps) > 0 {
		forward[w.Steps[0].Name] = true
	}
	undo := map[string]bool{}
	for _, s := range w.Steps {
		forward[s.Next], forward[s.OnTimeout] = true, true
		if s.Pipeline != nil && s.Pipeline.Rules != nil {
			for _, r := range s.Pipeline.Rules.Rules {
				forward[r.Next] = true
			}
		}
		if s.Compensate != "" {
			undo[s.Compensate] = true
		}
	}
	for n := range undo {
		if forward[n] {
			delete(undo, n)
		}
	}
	return undo
}

// shortDuration writes 1m rather than 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// chooses reports whether a step of rules alone has a rule that chooses the way on (next,
// complete, fail): such a step is drawn as a choice.
func chooses(s *config.Step) bool {
	if !s.Choice || s.Pipeline.Rules == nil {
		return false
	}
	for _, r := range s.Pipeline.Rules.Rules {
		if r.Next != "" || r.Complete || r.Fail != nil {
			return true
		}
	}
	return false
}

// stepLabel is a step's name with its delay, when it has one.
func stepLabel(s *config.Step) string {
	var notes []string
	if s.ForEach != nil {
		notes = append(notes, "for each") // a fan-out step: its handler runs once per element
	}
	if s.Delay > 0 {
		notes = append(notes, "delay "+shortDuration(s.Delay))
	}
	if len(notes) == 0 {
		return s.Name
	}
	return fmt.Sprintf("%s (%s)", s.Name, strings.Join(notes, ", "))
}

// stepEdges are the ways out of one step: its rules' (a choice step's), its own next or the
// run's completion (unless its rules always choose), its timeout and its compensation.
// A compensation (undo) without next is drawn without the completion edge: after it the run
// goes on compensating, then ends failed.
func stepEdges(s *config.Step, sid map[string]string, end func(string) string, undo bool) []graphEdge {
	from := sid[s.Name]
	var out []graphEdge
	falls := true // a delivery may leave by the step's own next
	if s.Choice && s.Pipeline.Rules != nil {
		falls = false
		always := false // an unconditional rule: the rules after it never decide
		for _, r := range s.Pipeline.Rules.Rules {
			label := "rule " + r.Name
			switch {
			case r.Fail != nil:
				out = append(out, graphEdge{from: from, to: end("failed"), label: label + ": fail"})
			case r.Complete:
				out = append(out, graphEdge{from: from, to: end("completed"), label: label})
			case r.Next != "":
				out = append(out, graphEdge{from: from, to: sid[r.Next], label: label})
			default:
				falls = true
			}
			if r.When == nil {
				always = true
				break
			}
		}
		falls = falls || !always // no rule held: otherwise, by the step's own next
	}
	if falls {
		if s.Next != "" {
			out = append(out, graphEdge{from: from, to: sid[s.Next]})
		} else if !undo {
			out = append(out, graphEdge{from: from, to: end("completed")})
		}
	}
	if s.Timeout > 0 {
		to := end("failed")
		if s.OnTimeout != "" {
			to = sid[s.OnTimeout]
		}
		out = append(out, graphEdge{from: from, to: to, label: "timeout " + shortDuration(s.Timeout), dashed: true})
	}
	if s.Compensate != "" {
		out = append(out, graphEdge{from: from, to: sid[s.Compensate], label: "compensate", dashed: true})
	}
	return out
}

// mermaidWorkflows writes each workflow as a subgraph of the flowchart, then its edges.
func (g *graph) mermaidWorkflows(b *strings.Builder, q func(string) string) {
	for _, wg := range g.workflows {
		fmt.Fprintf(b, "  subgraph %s[%s]\n", wg.id, q(wg.label))
		for _, n := range wg.nodes {
			open, close := "([", "])"
			switch n.shape {
			case shapeChoice:
				open, close = "{", "}"
			case shapeStart:
				open, close = "((", "))"
			case shapeEnd:
				open, close = "(((", ")))"
			}
			fmt.Fprintf(b, "    %s%s%s%s\n", n.id, open, q(n.label), close)
		}
		b.WriteString("  end\n")
	}
	for _, wg := range g.workflows {
		for _, e := range wg.edges {
			arrow := "-->"
			if e.dashed {
				arrow = "-.->"
			}
			if e.label == "" {
				fmt.Fprintf(b, "  %s %s %s\n", e.from, arrow, e.to)
			} else {
				fmt.Fprintf(b, "  %s %s|%s| %s\n", e.from, arrow, q(e.label), e.to)
			}
		}
	}
}

// dotWorkflows writes each workflow as a cluster of the digraph, then its edges.
func (g *graph) dotWorkflows(b *strings.Builder, q func(string) string) {
	for _, wg := range g.workflows {
		fmt.Fprintf(b, "  subgraph %s {\n    label=%s;\n", q("cluster_"+wg.id), q(wg.label))
		for _, n := range wg.nodes {
			attrs := "shape=box, style=rounded"
			switch n.shape {
			case shapeChoice:
				attrs = "shape=diamond"
			case shapeStart:
				attrs = "shape=circle"
			case shapeEnd:
				attrs = "shape=doublecircle"
			}
			fmt.Fprintf(b, "    %s [label=%s, %s];\n", q(n.id), q(n.label), attrs)
		}
		b.WriteString("  }\n")
	}
	for _, wg := range g.workflows {
		for _, e := range wg.edges {
			var attrs []string
			if e.label != "" {
				attrs = append(attrs, "label="+q(e.label))
			}
			if e.dashed {
				attrs = append(attrs, "style=dashed")
			}
			if len(attrs) == 0 {
				fmt.Fprintf(b, "  %s -> %s;\n", q(e.from), q(e.to))
			} else {
				fmt.Fprintf(b, "  %s -> %s [%s];\n", q(e.from), q(e.to), strings.Join(attrs, ", "))
			}
		}
	}
}
