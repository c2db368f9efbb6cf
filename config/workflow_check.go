package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/internal/keyslot"
)

// checkWorkflowGraph checks the step names written in the workflow's steps (next, compensate,
// on_timeout, a rule's next) against its steps, and warns of a step no path from the first
// reaches: the graph is known at load time (SPEC §16).
func checkWorkflowGraph(w *Workflow) hcl.Diagnostics {
	var diags hcl.Diagnostics
	names := make([]string, len(w.Steps))
	for i, s := range w.Steps {
		names[i] = s.Name
	}
	valid := true
	for _, s := range w.Steps {
		for _, ref := range s.refs {
			if w.Step(ref.name) != nil {
				continue
			}
			valid = false
			detail := fmt.Sprintf("There is no step %q in workflow %q.", ref.name, w.Name)
			if dym := didYouMean(ref.name, names); dym != "" {
				detail += dym
			} else {
				detail += fmt.Sprintf(" Its steps are %s.", quoteList(names, "and"))
			}
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unknown step",
				Detail:   detail,
				Subject:  ref.rng.Ptr(),
			})
		}
	}
	if !valid || len(w.Steps) == 0 {
		return diags // reachability over a broken graph would only add noise
	}
	diags = append(diags, checkWaitCompensations(w)...)
	reached := w.Reachable()
	for _, s := range w.Steps {
		if !reached[s.Name] {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagWarning,
				Summary:  "Unreachable step",
				Detail: fmt.Sprintf("No path from the first step %q reaches step %q (through next, a rule's next, on_timeout or compensate), so it never runs.",
					w.Steps[0].Name, s.Name),
				Subject: s.DeclRange.Ptr(),
			})
		}
	}
	return diags
}

// Targets lists the steps a step may hand its run to, in the order written: next, its rules'
// next, on_timeout and compensate (each once).
func (s *Step) Targets() []string {
	var out []string
	seen := map[string]bool{}
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	add(s.Next)
	if s.Pipeline != nil && s.Pipeline.Rules != nil {
		for _, r := range s.Pipeline.Rules.Rules {
			add(r.Next)
		}
	}
	add(s.OnTimeout)
	add(s.Compensate)
	return out
}

// Reachable is the set of steps a run can visit: from the first step, through next, the
// rules' next, on_timeout and compensate.
func (w *Workflow) Reachable() map[string]bool {
	reached := map[string]bool{}
	if len(w.Steps) == 0 {
		return reached
	}
	queue := []string{w.Steps[0].Name}
	reached[queue[0]] = true
	for len(queue) > 0 {
		s := w.Step(queue[0])
		queue = queue[1:]
		if s == nil {
			continue
		}
		for _, t := range s.Targets() {
			if !reached[t] {
				reached[t] = true
				queue = append(queue, t)
			}
		}
	}
	return reached
}

// checkWorkflowCluster warns, on a Redis Cluster, of a dead letter outside the workflow's hash
// slot: it cannot be written by the script that fails a run, so it is written on its own.
func checkWorkflowCluster(w *Workflow, redis map[string]*Redis) hcl.Diagnostics {
	r := redis[w.Redis]
	if r == nil || len(r.Cluster) == 0 || w.deadLetterRange.Filename == "" {
		return nil
	}
	own := keyslot.Of(DefaultDeadLetter(w.Name))
	if keyslot.Of(w.DeadLetter) == own {
		return nil
	}
	return hcl.Diagnostics{{
		Severity: hcl.DiagWarning,
		Summary:  "Keys in different cluster slots",
		Detail: fmt.Sprintf("The redis block %q is a Redis Cluster, and every key of workflow %q is in slot %d (the hash tag {%s}), but dead_letter %q is in slot %d: it is written on its own, not in the one script that fails the run. Give it the hash tag to keep them together: dead_letter = %q.",
			r.Name, w.Name, own, w.Name, w.DeadLetter, keyslot.Of(w.DeadLetter), "flowrun:{"+w.Name+"}:dead"),
		Subject: w.deadLetterRange.Ptr(),
	}}
}

// Fingerprint is a hash of the workflow's effective configuration (its block, and the redis
// blocks it uses): two loads give the same fingerprint exactly when the workflow would run the
// same. Its start and step pipelines carry the same fingerprint.
func (w *Workflow) Fingerprint() string { return w.fingerprint }

// RedisBlocks names the redis blocks the workflow uses (its own, its start source's, its steps'
// emits'), sorted.
func (w *Workflow) RedisBlocks() []string { return w.redisBlocks }

// Pipelines lists the pipelines a workflow runs as: its start, then each step's, in order.
func (w *Workflow) Pipelines() []*Pipeline {
	var out []*Pipeline
	if w.Start != nil {
		out = append(out, w.Start)
	}
	for _, s := range w.Steps {
		out = append(out, s.Pipeline)
	}
	for _, s := range w.Steps {
		if s.Wait != nil && s.Wait.Pipeline != nil {
			out = append(out, s.Wait.Pipeline)
		}
	}
	return out
}

// checkWorkflowNames rejects a workflow named like a pipeline, or whose step pipeline
// ("WORKFLOW/STEP") is: metrics, status and reloads tell pipelines apart by name.
func checkWorkflowNames(ws []*Workflow, pipelines map[string]*Pipeline) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, w := range ws {
		for _, pl := range w.Pipelines() {
			other, clash := pipelines[pl.Name]
			if !clash {
				continue
			}
			what, at := fmt.Sprintf("workflow %q runs its start as the pipeline %q", w.Name, pl.Name), w.DeclRange
			if pl != w.Start {
				what, at = fmt.Sprintf("workflow %q runs a step as the pipeline %q", w.Name, pl.Name), pl.DeclRange
			}
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate pipeline name",
				Detail:   fmt.Sprintf("The %s, but a pipeline block of that name is declared at %s; rename one of them.", what, where(other.DeclRange)),
				Subject:  at.Ptr(),
			})
		}
	}
	return diags
}

// resolveWorkflow resolves the workflow's redis block, then its start source's (defaulting to
// the workflow's) and its steps' emits' (likewise).
func (r redisResolver) resolveWorkflow(w *Workflow) hcl.Diagnostics {
	name, diags := r.resolve(w.Redis, w.redisRange, w.DeclRange, fmt.Sprintf("Workflow %q (its runs live in Redis)", w.Name))
	w.Redis = name
	if src := w.Start.sourceOrNil(); src != nil && src.readsRedis() {
		if src.Redis == "" {
			src.Redis = name // unresolved: reported at the workflow already
		} else {
			n, ds := r.resolve(src.Redis, src.redisRange, src.DeclRange, fmt.Sprintf("A %s source", src.Kind))
			diags = append(diags, ds...)
			src.Redis = n
		}
	}
	diags = append(diags, r.resolveWaits(w, name)...)
	for _, s := range w.Steps {
		pl := s.Pipeline
		for _, ref := range pl.emitRefs {
			target := &pl.Rules.Rules[ref.rule].Emits[ref.emit].Target
			if ref.name == "" {
				target.Redis = name
				continue
			}
			n, ds := r.resolve(ref.name, ref.nameRange, ref.declRange, fmt.Sprintf("A %s emit", target.Kind))
			diags = append(diags, ds...)
			target.Redis = n
		}
	}
	return diags
}

// sourceOrNil is the pipeline's source; nil for a nil pipeline (a workflow without start).
func (p *Pipeline) sourceOrNil() *Source {
	if p == nil {
		return nil
	}
	return p.Source
}
