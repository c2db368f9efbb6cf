package main

import (
	"context"
	"fmt"
)

// flowConcurrency is the flow workload's concurrency on every run when -concurrency is not
// set: flow control is for handlers that wait on something, which run many at once.
const flowConcurrency = 64

// flowBlocks are the flow workload's blocks, each sized not to bind on its own data (100
// customers, unique ids), so that what is measured is what the block costs.
var flowBlocks = []struct{ name, block string }{
	{"concurrency_key", `  concurrency_key {
    key   = "payload.customer"
    limit = 1
  }`},
	{"throttle", `  throttle {
    key    = "payload.customer"
    limit  = 1000000
    period = "1s"
  }`},
	{"dedupe", `  dedupe {
    key    = "payload.id"
    window = "1h"
  }`},
}

// runFlow runs the rules workload on flowrun without flow control, then once with each block
// (SPEC §13), in the same run: each row's left side is the run without a block. Both sides
// settle n entries and n/10 retry copies, with the same emits, and are checked alike.
func runFlow(ctx context.Context, b *bench) (results, error) {
	n := int64(b.o.n)
	copies := int64(expectedRetries(b.o.n))
	total := n + copies
	conc := b.concurrencyLine()
	if b.o.concurrency == 0 {
		conc = fmt.Sprintf("  concurrency = %d\n", flowConcurrency)
	}
	side := func(name, stream, block string) (span, int64, error) {
		if err := preloadStreams(ctx, b.rdb, b.o.n, stream); err != nil {
			return span{}, 0, err
		}
		sp, rss, err := b.timeFlowrun(name, b.rulesConfig(stream, conc, block), total, streamSettled(b.obs, stream, "g"))
		if err != nil {
			return span{}, 0, err
		}
		if err := checkRules(ctx, b.rdb, stream, n, copies); err != nil {
			return span{}, 0, err
		}
		// Free the memory before the next side; the flow-control keys expire by themselves.
		return sp, rss, b.rdb.Del(ctx, stream, stream+":out").Err()
	}
	base, _, err := side("flow-none", "bench:flow:none", "")
	if err != nil {
		return results{}, err
	}
	var out results
	for _, fb := range flowBlocks {
		with, rss, err := side("flow-"+fb.name, "bench:flow:"+fb.name, fb.block)
		if err != nil {
			return results{}, fmt.Errorf("%s: %w", fb.name, err)
		}
		r := row{name: "flow " + fb.name, plain: base, flowrun: with, rss: rss, baseline: "without the block"}
		r.report()
		out.rows = append(out.rows, r)
	}
	return out, nil
}
