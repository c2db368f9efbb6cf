package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports"
)

// reloader applies SIGHUP (SPEC §10 "Reload"): it loads and validates the files again; on an
// error it logs the diagnostics and changes nothing. Otherwise it stops the pipelines that were
// removed or changed (each drains as on SIGTERM), and then starts the new and changed ones;
// pipelines whose fingerprint (config.Pipeline.Fingerprint) is the same are not touched.
type reloader struct {
	paths   []string
	opts    config.Options
	names   []string // --pipeline, applied on every reload
	eng     *engine.Engine
	w       *wiring
	wfs     *workflows // the workflows running (SPEC §16), restarted when their fingerprint changes
	metrics *promMetrics
	log     zerolog.Logger

	mu        sync.Mutex
	selected  []*config.Pipeline // as last loaded, in file order
	stdinRead bool               // a pipeline has read standard input: no other may
}

// current returns the pipelines of the last good load, for the gauges.
func (r *reloader) current() []*config.Pipeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.selected
}

// loop reloads on each signal on hup until ctx ends; signals during a reload make one more.
// One sent while flowrun starts waits for the engine to run the pipelines first.
func (r *reloader) loop(ctx context.Context, hup <-chan os.Signal) {
	select {
	case <-ctx.Done():
		return
	case <-r.eng.Started():
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload(ctx)
		}
	}
}

// reload loads the files again and, when they are good, applies the difference to the engine.
func (r *reloader) reload(ctx context.Context) {
	r.log.Info().Msg("reloading the configuration (SIGHUP)")
	cfg, next, ok := r.load()
	if !ok {
		return
	}
	wpl := r.wfs.plan(selectWorkflows(cfg, r.names))
	if err := r.wfs.refuse(ctx, wpl); err != nil {
		r.log.Error().Err(err).Msg("reload refused; running pipelines and workflows untouched")
		return
	}
	if old := r.w.config().Telemetry; !sameTelemetry(old, cfg.Telemetry) {
		r.log.Warn().Msg("the telemetry block changed: it applies at the next start of flowrun, not on a reload")
	}
	pl := r.plan(next)
	// Changed and removed workflows stop first, whole (their timers, then their pipelines), so
	// that no client a reload closes is still theirs; the new ones start last.
	r.wfs.stop(r.eng, wpl.stop)

	// Stop the removed and changed pipelines, all at once. A changed pipeline starts again once
	// its old run has drained (the two must not overlap: the same consumer, the same standard
	// input; its held copies are written first), and once every old user of a redis block it
	// needs anew has stopped and that block's old client is closed. New pipelines that need
	// nothing of that start at once.
	stopped := r.stopAll(append(append([]string(nil), pl.removed...), pl.changed...))
	dropped := r.dropClients(cfg, pl.running, wpl.next, pl.old, stopped)
	failed := r.startAll(ctx, pl.start, stopped, dropped)
	for _, ch := range stopped {
		<-ch
	}
	for _, ch := range dropped {
		<-ch
	}
	failedWF := r.wfs.start(ctx, r.eng, wpl.start)
	for _, o := range wpl.stop {
		if slices.Contains(wpl.removed, o.cfg.Name) {
			for _, name := range o.names() {
				r.metrics.forget(name)
			}
		}
	}
	running := pl.running
	for _, name := range failed {
		running = without(running, name) // tried again as new by the next reload
	}
	r.mu.Lock()
	r.selected = running
	r.mu.Unlock()
	for _, name := range pl.removed {
		r.metrics.forget(name)
	}

	ev := r.log.Info()
	if len(failed) > 0 || len(failedWF) > 0 {
		sort.Strings(failed)
		ev = r.log.Error().Strs("failed", nonNil(failed)).Strs("failed_workflows", nonNil(failedWF))
	}
	ev.Strs("added", nonNil(pl.added)).Strs("changed", nonNil(pl.changed)).Strs("removed", nonNil(pl.removed)).
		Strs("kept", nonNil(pl.kept)).
		Strs("workflows_added", nonNil(wpl.added)).Strs("workflows_changed", nonNil(wpl.changed)).
		Strs("workflows_removed", nonNil(wpl.removed)).Strs("workflows_kept", nonNil(wpl.kept)).Msg("reloaded")
}

// load loads and validates the files and selects the --pipeline ones; on an error it logs the
// diagnostics and reports false, so the running pipelines stay as they are.
func (r *reloader) load() (*config.Config, []*config.Pipeline, bool) {
	cfg, diags := config.Load(r.paths, r.opts)
	if !diags.HasErrors() {
		var ds hcl.Diagnostics
		_, ds = selectPipelines(cfg, r.names)
		diags = append(diags, ds...)
	}
	logDiagnostics(r.log, diags)
	if diags.HasErrors() {
		r.log.Error().Int("errors", countErrors(diags)).Msg("reload failed; running pipelines untouched")
		return nil, nil, false
	}
	next, _ := selectPipelines(cfg, r.names)
	return cfg, next, true
}

// reloadPlan is what a reload does with each pipeline, by name.
type reloadPlan struct {
	old                           map[string]*config.Pipeline // the last load's, by name
	added, changed, kept, removed []string
	start                         []*config.Pipeline // the added and changed, to start
	running                       []*config.Pipeline // what runs after the reload, its config
}

// plan compares the pipelines to run with those of the last load by their fingerprints.
func (r *reloader) plan(next []*config.Pipeline) reloadPlan {
	pl := reloadPlan{old: map[string]*config.Pipeline{}, running: make([]*config.Pipeline, 0, len(next))}
	for _, p := range r.current() {
		pl.old[p.Name] = p
	}
	seen := map[string]bool{}
	for _, p := range next {
		seen[p.Name] = true
		switch o := pl.old[p.Name]; {
		case o == nil && readsStdin(p) && r.stdinRead:
			r.log.Error().Str(engine.FieldPipeline, p.Name).Msg("cannot start pipeline: standard input was read by another pipeline already")
			continue // not running: tried again by the next reload
		case o == nil:
			pl.added = append(pl.added, p.Name)
			pl.start = append(pl.start, p)
			pl.running = append(pl.running, p)
		case o.Fingerprint() != p.Fingerprint() && (readsStdin(o) || readsStdin(p)):
			// Its reader has read ahead of what it handed over: a new run would lose those
			// lines. It runs on as it was.
			r.log.Warn().Str(engine.FieldPipeline, p.Name).Msg("pipeline reads standard input and is not restarted by a reload: its change applies at the next start of flowrun")
			pl.kept = append(pl.kept, p.Name)
			pl.running = append(pl.running, o)
		case o.Fingerprint() != p.Fingerprint():
			pl.changed = append(pl.changed, p.Name)
			pl.start = append(pl.start, p)
			pl.running = append(pl.running, p)
		default:
			pl.kept = append(pl.kept, p.Name)
			pl.running = append(pl.running, p)
		}
	}
	for _, p := range r.current() {
		if !seen[p.Name] {
			pl.removed = append(pl.removed, p.Name)
		}
	}
	return pl
}

// stopAll stops the named pipelines at once, each in its own goroutine; a pipeline's channel
// closes once it has drained and its wiring is released.
func (r *reloader) stopAll(names []string) map[string]chan struct{} {
	stopped := map[string]chan struct{}{}
	for _, name := range names {
		done := make(chan struct{})
		stopped[name] = done
		go func() {
			defer close(done)
			if err := r.eng.Stop(name); err != nil {
				r.log.Error().Err(err).Str(engine.FieldPipeline, name).Msg("pipeline failed while stopping")
			}
			r.w.release(name)
		}()
	}
	return stopped
}

// dropClients closes each redis block whose client goes (changed, removed, or used by no
// pipeline now) once its old users have stopped; its cached sinks go with it. A block's channel
// closes once its client is closed.
func (r *reloader) dropClients(cfg *config.Config, running []*config.Pipeline, wfs []*config.Workflow, old map[string]*config.Pipeline, stopped map[string]chan struct{}) map[string]chan struct{} {
	dropped := map[string]chan struct{}{}
	var wfBlocks []string
	for _, wf := range wfs {
		wfBlocks = append(wfBlocks, wf.RedisBlocks()...)
	}
	for _, b := range r.w.reconfigure(cfg, running, wfBlocks) {
		done := make(chan struct{})
		dropped[b] = done
		var users []chan struct{}
		for name, ch := range stopped {
			if slices.Contains(old[name].RedisBlocks(), b) {
				users = append(users, ch)
			}
		}
		go func() {
			defer close(done)
			for _, ch := range users {
				<-ch
			}
			r.w.dropClient(b)
			r.eng.DropSinks(func(t engine.Target) bool { return t.Redis == b })
			r.log.Info().Str("redis", b).Msg("closed the client of a redis block changed or no longer used")
		}()
	}
	return dropped
}

// startAll starts the pipelines at once, each after its old run has stopped and the old clients
// of its redis blocks are closed, and returns the names of those that failed to start.
func (r *reloader) startAll(ctx context.Context, start []*config.Pipeline, stopped, dropped map[string]chan struct{}) []string {
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	for _, p := range start {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ch := stopped[p.Name]; ch != nil {
				<-ch
			}
			for _, b := range p.RedisBlocks() {
				if ch := dropped[b]; ch != nil {
					<-ch
				}
			}
			if readsStdin(p) {
				r.mu.Lock()
				r.stdinRead = true
				r.mu.Unlock()
			}
			if err := r.startOne(ctx, p); err != nil {
				r.log.Error().Err(err).Str(engine.FieldPipeline, p.Name).Msg("cannot start pipeline")
				mu.Lock()
				failed = append(failed, p.Name)
				mu.Unlock()
				return
			}
			r.log.Info().Str(engine.FieldPipeline, p.Name).Str(engine.FieldSource, p.Source.Kind).Msg("pipeline started")
		}()
	}
	wg.Wait()
	return failed
}

// sameTelemetry compares two telemetry blocks by what they set.
func sameTelemetry(a, b *config.Telemetry) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.OTLPEndpoint == b.OTLPEndpoint && a.SampleRatio == b.SampleRatio
}

// readsStdin reports whether the pipeline's source reads standard input (a pipe source).
func readsStdin(p *config.Pipeline) bool {
	r, ok := p.Source.Config.(transports.StdinReader)
	return ok && r.ReadsStdin()
}

// startOne builds and starts one pipeline of a reload.
func (r *reloader) startOne(ctx context.Context, p *config.Pipeline) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ep, err := r.w.pipeline(ctx, p)
	if err != nil {
		return err
	}
	if err := r.eng.Start(ep); err != nil {
		ep.Source.Close()
		r.w.release(p.Name)
		return err
	}
	return nil
}

// logDiagnostics logs each diagnostic of a reload as one line, `FILE:LINE:COL: error: ...`
// as validate prints it (without the snippet), at error or warn.
func logDiagnostics(log zerolog.Logger, diags hcl.Diagnostics) {
	for _, d := range diags {
		ev, sev := log.Error(), "error"
		if d.Severity == hcl.DiagWarning {
			ev, sev = log.Warn(), "warning"
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if s := d.Subject; s != nil {
			ev = ev.Str("file", s.Filename).Int("line", s.Start.Line).Int("col", s.Start.Column)
			msg = fmt.Sprintf("%s:%d:%d: %s: %s", s.Filename, s.Start.Line, s.Start.Column, sev, msg)
		} else {
			msg = sev + ": " + msg
		}
		ev.Msg(msg)
	}
}

func countErrors(diags hcl.Diagnostics) int {
	n := 0
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			n++
		}
	}
	return n
}

func without(ps []*config.Pipeline, name string) []*config.Pipeline {
	out := ps[:0:0]
	for _, p := range ps {
		if p.Name != name {
			out = append(out, p)
		}
	}
	return out
}

// nonNil makes an empty list log as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
