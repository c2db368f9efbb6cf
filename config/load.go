package config

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
)

// Load reads each PATH (a .hcl file, or a folder read non-recursively in name order, all *.hcl;
// no paths means "."), decodes and validates everything. diags holds every problem at once,
// sorted by file (in load order) and position. The Config is usable only when diags has no
// errors, but its Files are always set so that diagnostics can be printed with snippets.
func Load(paths []string, opts Options) (*Config, hcl.Diagnostics) {
	if len(paths) == 0 {
		paths = []string{"."}
	}
	p := newParser(opts)
	names, diags := collectFiles(paths)

	var decoded []*fileConfig
	complete := true // every file parsed: cross-file references can be judged
	for _, name := range names {
		fc, ds := p.loadFile(name)
		diags = append(diags, ds...)
		if fc == nil {
			complete = false
			continue
		}
		decoded = append(decoded, fc)
	}
	cfg, ds := merge(decoded, complete)
	diags = append(diags, ds...)
	cfg.files = p.p.Files()
	sortDiagnostics(diags, names)
	return cfg, diags
}

// parser keeps every file it read, for snippets.
type parser struct {
	p        *hclparse.Parser
	schemas  *schemas // the registered kinds, read once per load
	consumer string   // default consumer name of sources
	override bool     // consumer overrides names written in sources
}

func newParser(opts Options) *parser {
	p := &parser{p: hclparse.NewParser(), schemas: newSchemas(), consumer: opts.Hostname}
	if opts.Consumer != "" {
		p.consumer, p.override = opts.Consumer, true
	}
	if p.consumer == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "flowrun"
		}
		p.consumer = h
	}
	return p
}

// collectFiles expands PATHs into file names, folders non-recursively in name order, each file
// once.
func collectFiles(paths []string) ([]string, hcl.Diagnostics) {
	var names []string
	var diags hcl.Diagnostics
	seen := map[string]bool{}
	add := func(name string) {
		key := name
		if abs, err := filepath.Abs(name); err == nil {
			key = abs
		}
		if !seen[key] {
			seen[key] = true
			names = append(names, name)
		}
	}
	for _, path := range paths {
		st, err := os.Stat(path)
		if err != nil {
			diags = append(diags, pathDiag(path, "Cannot read configuration", fmt.Sprintf("%s.", statReason(err))))
			continue
		}
		if !st.IsDir() {
			add(path)
			continue
		}
		entries, err := os.ReadDir(path) // sorted by name
		if err != nil {
			diags = append(diags, pathDiag(path, "Cannot read configuration", fmt.Sprintf("%s.", statReason(err))))
			continue
		}
		n := 0
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".hcl") {
				continue
			}
			add(filepath.Join(path, e.Name()))
			n++
		}
		if n == 0 {
			diags = append(diags, pathDiag(path, "No configuration files", "The folder holds no .hcl files."))
		}
	}
	return names, diags
}

func statReason(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// pathDiag is a problem with a whole path: its subject is the path's first position.
func pathDiag(path, summary, detail string) *hcl.Diagnostic {
	start := hcl.Pos{Line: 1, Column: 1}
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   detail,
		Subject:  &hcl.Range{Filename: path, Start: start, End: start},
	}
}

// loadFile reads, parses and decodes one file. It returns nil when the file cannot be read or
// has syntax errors: decoding a broken body would only add confusing follow-on errors.
func (p *parser) loadFile(name string) (*fileConfig, hcl.Diagnostics) {
	src, err := os.ReadFile(name)
	if err != nil {
		return nil, hcl.Diagnostics{pathDiag(name, "Cannot read configuration", statReason(err)+".")}
	}
	f, diags := p.p.ParseHCL(src, name)
	if diags.HasErrors() || f == nil {
		return nil, diags
	}
	dir := filepath.Dir(name)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	rec := &inputRecorder{}
	d := &fileDecoder{
		filename: name,
		dir:      dir,
		src:      f.Bytes,
		rec:      rec,
		ctx:      evalContext(dir, rec),
		schemas:  p.schemas,
		consumer: p.consumer,
		override: p.override,
	}
	fc, ds := d.decodeFile(f.Body)
	return fc, append(diags, ds...)
}

// fileDecoder decodes the blocks of one file.
type fileDecoder struct {
	filename string
	dir      string // absolute; relative paths in the file are resolved against it
	src      []byte
	ctx      *hcl.EvalContext
	rec      *inputRecorder // what env() and file() returned, for fingerprints
	schemas  *schemas
	consumer string
	override bool
}

// fileConfig is what one file declares, before the merge.
type fileConfig struct {
	redis     []*Redis
	pipelines []*Pipeline
	workflows []*Workflow
	tests     []*Test
	telemetry []*Telemetry
}

// rootBody is a file's top level, documented: Reference starts here.
var rootBody = &schema.Body{Blocks: []schema.Block{
	{Type: "redis", Labels: []string{"name"}, Occurs: "any number", Body: redisBody,
		Doc: "A Redis connection that sources and emits name. When there is exactly one, they use it without naming it."},
	{Type: "pipeline", Labels: []string{"name"}, Occurs: "any number", Body: pipelineBody,
		Doc: "A source, the rules or Go handler that decide each message's outcome, and the failure policy."},
	{Type: "workflow", Labels: []string{"name"}, Occurs: "any number", Body: workflowBody,
		Doc: "Steps that share a run: one durable record in Redis per run, moved from step to step exactly once per visit, compensated on failure (SPEC §16, docs/workflows.md). Its start pipeline is named like the workflow, each step's `WORKFLOW/STEP`; no pipeline may share the workflow's name."},
	{Type: "test", Labels: []string{"name"}, Occurs: "any number", Body: testBody,
		Doc: "A config test, run by `flowrun test` without any connection: a message, and the outcome and emits a pipeline must produce."},
	{Type: "telemetry", Occurs: "at most one, for all the files", Body: telemetryBody,
		Doc: "Export OpenTelemetry traces over OTLP/HTTP (`flowrun run`). Without it, the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) variable turns tracing on; with neither, nothing is exported and nothing is added to messages. See docs/tracing.md."},
}}

var rootSchema = rootBody.HCL()

// Reference is the configuration language as declared: every block and attribute config decodes,
// with its documentation, for the reference `go generate ./docs` writes. Source blocks and
// handler blocks are declared by their kinds (transports.Kinds) and handlers.
func Reference() *schema.Body { return rootBody }

func (d *fileDecoder) decodeFile(body hcl.Body) (*fileConfig, hcl.Diagnostics) {
	fc := &fileConfig{}
	content, diags := body.Content(rootSchema)
	for _, block := range content.Blocks {
		diags = append(diags, checkName(block)...)
		switch block.Type {
		case "redis":
			var r *Redis
			var ds hcl.Diagnostics
			fp := d.fingerprintBlock(block, func() { r, ds = d.decodeRedisBlock(block) })
			diags = append(diags, ds...)
			if r != nil {
				r.fingerprint = fp
				fc.redis = append(fc.redis, r)
			}
		case "pipeline":
			var pl *Pipeline
			var ds hcl.Diagnostics
			fp := d.fingerprintBlock(block, func() { pl, ds = d.decodePipelineBlock(block) })
			diags = append(diags, ds...)
			if pl != nil {
				pl.fingerprint = fp
				fc.pipelines = append(fc.pipelines, pl)
			}
		case "workflow":
			var w *Workflow
			var ds hcl.Diagnostics
			fp := d.fingerprintBlock(block, func() { w, ds = d.decodeWorkflowBlock(block) })
			diags = append(diags, ds...)
			if w != nil {
				w.fingerprint = fp
				fc.workflows = append(fc.workflows, w)
			}
		case "test":
			t, ds := d.decodeTestBlock(block)
			diags = append(diags, ds...)
			if t != nil {
				fc.tests = append(fc.tests, t)
			}
		case "telemetry":
			t, ds := d.decodeTelemetryBlock(block)
			diags = append(diags, ds...)
			fc.telemetry = append(fc.telemetry, t)
		}
	}
	return fc, diags
}

// checkName rejects an empty block name, which nothing could refer to.
func checkName(block *hcl.Block) hcl.Diagnostics {
	if len(block.Labels) == 1 && strings.TrimSpace(block.Labels[0]) == "" {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Invalid name",
			Detail:   fmt.Sprintf("A %s block needs a non-empty name.", block.Type),
			Subject:  block.LabelRanges[0].Ptr(),
		}}
	}
	return nil
}

// merge joins the files: duplicate names are reported at the later declaration, then references
// between blocks are resolved. With complete false (a file did not parse) unresolved references
// are not reported, as they may well be declared in the broken file.
func merge(files []*fileConfig, complete bool) (*Config, hcl.Diagnostics) {
	cfg := &Config{}
	var diags hcl.Diagnostics

	redis := map[string]*Redis{}
	pipelines := map[string]*Pipeline{}
	workflows := map[string]*Workflow{}
	tests := map[string]*Test{}
	for _, fc := range files {
		keepFirst("redis", fc.redis, redis, &cfg.Redis, func(r *Redis) (string, hcl.Range) { return r.Name, r.DeclRange }, &diags)
		keepFirst("pipeline", fc.pipelines, pipelines, &cfg.Pipelines, func(p *Pipeline) (string, hcl.Range) { return p.Name, p.DeclRange }, &diags)
		keepFirst("workflow", fc.workflows, workflows, &cfg.Workflows, func(w *Workflow) (string, hcl.Range) { return w.Name, w.DeclRange }, &diags)
		keepFirst("test", fc.tests, tests, &cfg.Tests, func(t *Test) (string, hcl.Range) { return t.Name, t.DeclRange }, &diags)
		for _, t := range fc.telemetry {
			if cfg.Telemetry != nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Duplicate telemetry block",
					Detail:   fmt.Sprintf("A telemetry block was already declared at %s; there is one for all the files.", where(cfg.Telemetry.DeclRange)),
					Subject:  t.DeclRange.Ptr(),
				})
				continue
			}
			cfg.Telemetry = t
		}
	}
	diags = append(diags, checkWorkflowNames(cfg.Workflows, pipelines)...)
	if !complete {
		return cfg, diags
	}

	res := redisResolver{byName: redis}
	for _, r := range cfg.Redis {
		res.names = append(res.names, r.Name)
	}
	for _, pl := range cfg.Pipelines {
		diags = append(diags, res.resolvePipeline(pl)...)
		diags = append(diags, checkClusterSlots(pl, redis)...)
	}
	for _, w := range cfg.Workflows {
		diags = append(diags, res.resolveWorkflow(w)...)
		diags = append(diags, checkClusterSlots(w.Start, redis)...)
		diags = append(diags, checkWorkflowCluster(w, redis)...)
	}
	for _, t := range cfg.Tests {
		diags = append(diags, resolveTest(t, pipelines)...)
		diags = append(diags, resolveWorkflowTest(t, cfg.Workflows)...)
	}
	cfg.finishFingerprints()
	return cfg, diags
}

// checkClusterSlots lets the source's kind check, when its redis block is a Redis Cluster, the
// keys that must share a hash slot (SPEC §5, §12): the files alone decide it.
func checkClusterSlots(pl *Pipeline, redis map[string]*Redis) hcl.Diagnostics {
	src := pl.sourceOrNil()
	if src == nil || !src.readsRedis() || src.Config == nil {
		return nil
	}
	r := redis[src.Redis]
	if r == nil || len(r.Cluster) == 0 {
		return nil
	}
	if cc, ok := src.Config.(transports.ClusterChecker); ok {
		return cc.CheckCluster(r.Name)
	}
	return nil
}

// keepFirst appends the named blocks of one kind to all, in order, and reports each whose name
// is in seen already as a duplicate of the first; decl gives a block's name and range.
func keepFirst[T any](kind string, blocks []T, seen map[string]T, all *[]T, decl func(T) (string, hcl.Range), diags *hcl.Diagnostics) {
	for _, b := range blocks {
		name, rng := decl(b)
		if prev, dup := seen[name]; dup {
			_, prevRng := decl(prev)
			*diags = append(*diags, duplicate(kind, name, rng, prevRng))
			continue
		}
		seen[name] = b
		*all = append(*all, b)
	}
}

func duplicate(kind, name string, rng, prev hcl.Range) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  fmt.Sprintf("Duplicate %s block", kind),
		Detail:   fmt.Sprintf("%s %q was already declared at %s.", kind, name, where(prev)),
		Subject:  rng.Ptr(),
	}
}

// redisResolver resolves `redis = "NAME"` references and the default redis block.
type redisResolver struct {
	byName map[string]*Redis
	names  []string // in declaration order
}

// resolve returns the redis block named, or the only one when name is "".
// what and rng describe the referring block, for diagnostics.
func (r redisResolver) resolve(name string, nameRange, blockRange hcl.Range, what string) (string, hcl.Diagnostics) {
	if name != "" {
		if _, ok := r.byName[name]; ok {
			return name, nil
		}
		detail := fmt.Sprintf("There is no redis block named %q.", name)
		if s := didYouMean(name, r.names); s != "" {
			detail += s
		} else if len(r.names) > 0 {
			detail += fmt.Sprintf(" Declared: %s.", quoteList(r.names, "and"))
		}
		return "", hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unknown redis block", Detail: detail, Subject: nameRange.Ptr()}}
	}
	switch len(r.names) {
	case 1:
		return r.names[0], nil
	case 0:
		return "", hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Missing redis block",
			Detail:   fmt.Sprintf("%s needs Redis, but no redis block is declared.", what),
			Subject:  blockRange.Ptr(),
		}}
	}
	return "", hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Missing required argument",
		Detail: fmt.Sprintf("%s needs the argument \"redis\": there are several redis blocks (%s) and none is named.",
			what, quoteList(r.names, "and")),
		Subject: blockRange.Ptr(),
	}}
}

func (r redisResolver) resolvePipeline(pl *Pipeline) hcl.Diagnostics {
	var diags hcl.Diagnostics
	src := pl.Source
	if src == nil {
		return nil
	}
	// A source that runs without Redis where none is declared (transports.RedisOptional)
	// gives its emits no default block.
	ro, optional := src.Config.(transports.RedisOptional)
	withoutRedis := optional && src.Redis == "" && len(r.names) == 0
	switch {
	case withoutRedis:
		diags = append(diags, ro.WithoutRedis()...)
	case src.readsRedis():
		name, ds := r.resolve(src.Redis, src.redisRange, src.DeclRange, fmt.Sprintf("A %s source", src.Kind))
		diags = append(diags, ds...)
		src.Redis = name
	}
	for _, ref := range pl.emitRefs {
		target := &pl.Rules.Rules[ref.rule].Emits[ref.emit].Target
		switch {
		case ref.name == "" && src.readsRedis() && !withoutRedis:
			// The source's own redis block; if that did not resolve, it is reported already.
			target.Redis = src.Redis
		default:
			name, ds := r.resolve(ref.name, ref.nameRange, ref.declRange, fmt.Sprintf("A %s emit", target.Kind))
			diags = append(diags, ds...)
			target.Redis = name
		}
	}
	return diags
}

// sortDiagnostics orders diagnostics by file (in load order, unknown files first) then position,
// keeping the order of diagnostics at one place.
func sortDiagnostics(diags hcl.Diagnostics, names []string) {
	order := map[string]int{}
	for i, n := range names {
		order[n] = i + 1
	}
	key := func(d *hcl.Diagnostic) (int, int) {
		if d.Subject == nil {
			return -1, 0
		}
		return order[d.Subject.Filename], d.Subject.Start.Byte
	}
	sort.SliceStable(diags, func(i, j int) bool {
		fi, bi := key(diags[i])
		fj, bj := key(diags[j])
		if fi != fj {
			return fi < fj
		}
		return bi < bj
	})
}
