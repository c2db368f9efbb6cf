package config

import "github.com/flowrun/flowrun/rules"

// RunReads is what the step's expressions read of its run (rules, payload, for_each, flow
// keys), so its source loads no more than that. A handler step reads everything: a Go handler
// sees the whole run view (SPEC §8).
func (s *Step) RunReads() rules.RunReads {
	p := s.Pipeline
	if p == nil || p.Handler != nil {
		return rules.RunReads{Input: true, Steps: true}
	}
	r := p.Rules.RunReads().Or(s.Payload.RunReads()).Or(s.ForEach.RunReads())
	if s.Wait != nil {
		r = r.Or(s.Wait.Correlate.RunReads())
	}
	if f := p.Flow; f != nil {
		if f.Concurrency != nil {
			r = r.Or(f.Concurrency.Key.RunReads())
		}
		if f.Throttle != nil {
			r = r.Or(f.Throttle.Key.RunReads())
		}
		if f.Dedupe != nil {
			r = r.Or(f.Dedupe.Key.RunReads())
		}
	}
	return r
}

// Pure says the step has no effect but its outcome: rules alone (a choice step), no emit, no
// flow block, not a wait or a fan-out, no timeout. Its source may then start a visit this
// process entered from the run as that transition left it, unloaded: the transition is checked
// against the run again as it applies, and nothing else of the visit reaches the world. (A
// timeout is left out so that a visit the timeout overtook counts duplicate, as a loaded one
// does.)
func (s *Step) Pure() bool {
	p := s.Pipeline
	if !s.Choice || p == nil || p.Handler != nil || p.Flow != nil || p.Rules == nil ||
		s.Wait != nil || s.ForEach != nil || s.Timeout > 0 {
		return false
	}
	for _, r := range p.Rules.Rules {
		if len(r.Emits) > 0 {
			return false
		}
	}
	return true
}
