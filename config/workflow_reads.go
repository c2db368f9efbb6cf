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
