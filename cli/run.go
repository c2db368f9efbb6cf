package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/cli/status"
	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/telemetry"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/redisconn"
)

type runFlags struct {
	pipelines stringsFlag
	logFormat string
	logLevel  string
	httpAddr  string
	consumer  string
	progress  time.Duration
	token     string
}

func cmdRun(ctx context.Context, args []string, stdio Stdio) int {
	f, paths, err := parseRunFlags(args, stdio)
	if err != nil {
		return flagExit(err)
	}
	if f.progress < 0 {
		fmt.Fprintf(stdio.Err, "flowrun run: --progress-interval must not be negative\n")
		return ExitConfig
	}
	bar, logger, err := runLogger(f, stdio)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun run: %v\n", err)
		return ExitConfig
	}

	redisconn.SetDriverLogger(logger) // go-redis's own notices, at debug, not raw on stderr

	// SIGHUP reloads (SPEC §10); caught from here on, so that one sent while starting does not
	// kill the process. It is acted on once the pipelines run.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	opts := config.Options{Consumer: f.consumer}
	cfg := load(paths, opts, stdio)
	if cfg == nil {
		return ExitConfig
	}
	selected, diags := selectPipelines(cfg, f.pipelines)
	if len(diags) > 0 {
		config.WriteDiagnostics(stdio.Err, cfg.Files(), diags)
		return ExitConfig
	}
	w := newWiring(cfg, stdio, logger)
	defer w.close()
	metrics := newMetrics()
	flush, err := wireTelemetry(ctx, cfg, w, metrics, logger)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun run: %v\n", err)
		return ExitConfig
	}
	defer flush()
	pipelines, wfs, err := buildPipelines(ctx, w, selected, selectWorkflows(cfg, f.pipelines), metrics, f.consumer, logger)
	if err != nil {
		logger.Error().Err(err).Msg("cannot start")
		return ExitRuntime
	}

	eng := engine.New(engine.Options{Sinks: w.sink, Metrics: metrics, Progress: f.progress,
		DeadLettered: metrics.sources.deadLettered}, pipelines...)
	metrics.readEngine(eng)
	wfs.eng.Store(eng)
	rl := &reloader{paths: paths, opts: opts, names: f.pipelines, eng: eng, w: w, wfs: wfs, metrics: metrics,
		log: logger, selected: selected, stdinRead: anyReadsStdin(selected, wfs)}
	bg, stopBg := context.WithCancel(ctx)
	var bgDone sync.WaitGroup
	defer func() {
		stopBg()
		bgDone.Wait() // a reload under way ends before the wiring is closed
		wfs.wait()
	}()
	wfs.startAllTimers(bg)
	// What the status page and the sampler read, asked for at each use: a reload replaces it.
	running := rl.current
	if f.httpAddr != "" {
		env := func(b string) *transports.Env { return w.env(logger, b) }
		page := statusPage(running, wfs, eng, metrics.sources, env, f.token, logger)
		srv, err := serveHTTP(f.httpAddr, metrics, eng, page, logger)
		if err != nil {
			logger.Error().Err(err).Str("addr", f.httpAddr).Msg("cannot serve http")
			return ExitRuntime
		}
		defer srv.Close()
		bgDone.Add(1)
		go func() {
			defer bgDone.Done()
			metrics.sources.sample(bg, sampleEvery, eng.Ready, running, env, logger)
		}()
	}
	bgDone.Add(1)
	go func() {
		defer bgDone.Done()
		rl.loop(bg, hup)
	}()
	if bar != nil {
		bgDone.Add(1)
		go func() {
			defer bgDone.Done()
			bar.run(bg, eng.Pipelines)
		}()
	}
	logger.Info().Int("pipelines", len(pipelines)).Int("workflows", len(wfs.list())).Msg("flowrun started")
	if err := eng.Run(ctx); err != nil {
		logger.Error().Err(err).Msg("flowrun stopped on a failure")
		return ExitRuntime
	}
	logger.Info().Msg("flowrun stopped")
	return ExitOK
}

// parseRunFlags reads run's flags and the configuration paths after them.
func parseRunFlags(args []string, stdio Stdio) (runFlags, []string, error) {
	fs := newFlagSet("run", stdio)
	var f runFlags
	fs.Var(&f.pipelines, "pipeline", "run only this pipeline or workflow (repeatable; default all)")
	fs.StringVar(&f.logFormat, "log-format", "", "json or console (default json when stderr is not a terminal)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.httpAddr, "http-addr", "", "serve the status page, /metrics, /healthz and /readyz on HOST:PORT")
	fs.StringVar(&f.consumer, "consumer", "", "consumer name for every source (overrides the files)")
	fs.DurationVar(&f.progress, "progress-interval", 30*time.Second, "log a progress line per busy pipeline this often (0: never)")
	fs.StringVar(&f.token, "admin-token", "", "enable redrive and purge on the status page for requests carrying this token (default $FLOWRUN_ADMIN_TOKEN)")
	paths, err := parseArgs(fs, args)
	if err != nil {
		return f, nil, err
	}
	if f.token == "" {
		// read here, not as the flag's default, so that no help text can show it
		f.token = os.Getenv("FLOWRUN_ADMIN_TOKEN")
	}
	return f, paths, nil
}

// runLogger builds run's logger, and the progress bar when stderr shows one (nil otherwise).
func runLogger(f runFlags, stdio Stdio) (*progressBar, zerolog.Logger, error) {
	format := resolveLogFormat(stdio.Err, f.logFormat)
	var bar *progressBar
	logOut := stdio.Err
	if wantBar(format, stdio.Err) {
		bar = &progressBar{out: stdio.Err}
		logOut = bar // log lines go above the bar
	}
	logger, err := newLogger(logOut, format, f.logLevel)
	return bar, logger, err
}

// wireTelemetry starts trace export when the configuration asks for it; the returned flush,
// deferred by the caller, sends what is left at exit.
func wireTelemetry(ctx context.Context, cfg *config.Config, w *wiring, metrics *promMetrics, logger zerolog.Logger) (func(), error) {
	tel, err := startTelemetry(ctx, cfg, logger)
	if err != nil || tel == nil {
		return func() {}, err
	}
	w.tel = tel
	metrics.traces(tel)
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryFlush)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			logger.Warn().Err(err).Msg("trace export at exit")
		}
	}, nil
}

// selectPipelines applies --pipeline and checks what only a run can check: that at most one
// pipeline reads standard input.
func selectPipelines(cfg *config.Config, names []string) ([]*config.Pipeline, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	selected := cfg.Pipelines
	if len(names) > 0 {
		selected = nil
		for _, n := range names {
			p := cfg.Pipeline(n)
			if p == nil && cfg.Workflow(n) != nil {
				continue // selectWorkflows selects it
			}
			if p == nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Unknown pipeline",
					Detail:   fmt.Sprintf("--pipeline %q names no pipeline or workflow of the files loaded.", n),
				})
				continue
			}
			selected = append(selected, p)
		}
	}
	var stdin *config.Pipeline
	readers := selected
	for _, wf := range selectWorkflows(cfg, names) {
		readers = append(readers[:len(readers):len(readers)], wf.Start) // a start pipeline reads its source too
	}
	for _, p := range readers {
		if r, ok := p.Source.Config.(transports.StdinReader); !ok || !r.ReadsStdin() {
			continue
		}
		if stdin != nil {
			rng := p.Source.DeclRange
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Two pipelines read standard input",
				Detail:   fmt.Sprintf("Pipeline %q has a pipe source, and so has %q (%s:%d); run one of them with --pipeline.", p.Name, stdin.Name, stdin.Source.DeclRange.Filename, stdin.Source.DeclRange.Start.Line),
				Subject:  &rng,
			})
			continue
		}
		stdin = p
	}
	return selected, diags
}

// resolveLogFormat is --log-format, or when unset console on a terminal and json otherwise.
func resolveLogFormat(w io.Writer, format string) string {
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			format = "console"
		}
	}
	return format
}

// colour reports whether console logs to w may use ANSI colours: only on a terminal, and not
// when NO_COLOR is set to anything (https://no-color.org/), so a redirected stderr stays plain.
func colour(w io.Writer, getenv func(string) string) bool {
	f, ok := w.(*os.File)
	return ok && getenv("NO_COLOR") == "" && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" || lvl > zerolog.ErrorLevel || lvl < zerolog.DebugLevel {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	format = resolveLogFormat(w, format)
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !colour(w, os.Getenv)}
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format %q: want json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func serveHTTP(addr string, m *promMetrics, eng *engine.Engine, page http.Handler, log zerolog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !eng.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("/", page) // the status page and its API (SPEC §15)
	// Timeouts so a visitor cannot hold connections open; the 1 MiB of headers lets a long
	// filter reach the page, which answers it 400 naming its limit (SPEC §15).
	srv := &http.Server{Handler: status.Secure(mux), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: time.Minute, WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 1 << 20}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server failed")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("serving the status page, metrics and health")
	return srv, nil
}

// telemetryFlush bounds how long an exit waits for the last spans to reach the collector.
const telemetryFlush = 5 * time.Second

// startTelemetry starts trace export when the files have a telemetry block or the standard
// OTEL_EXPORTER_OTLP_* variables name a collector (SPEC §14); nil when neither does.
func startTelemetry(ctx context.Context, cfg *config.Config, log zerolog.Logger) (*telemetry.Provider, error) {
	c := telemetry.Config{SampleRatio: 1, Version: Version}
	switch {
	case cfg.Telemetry != nil:
		c.Endpoint, c.SampleRatio = cfg.Telemetry.OTLPEndpoint, cfg.Telemetry.SampleRatio
	case !telemetry.FromEnv():
		return nil, nil
	}
	p, err := telemetry.New(ctx, c, log)
	if err != nil {
		return nil, err
	}
	log.Info().Str("endpoint", c.Endpoint).Float64("sample_ratio", c.SampleRatio).Msg("exporting traces over OTLP/HTTP")
	return p, nil
}

// buildPipelines builds the selected pipelines and the start and step pipelines of the selected
// workflows, whose active runs the metrics read at scrape.
func buildPipelines(ctx context.Context, w *wiring, selected []*config.Pipeline, wfSelected []*config.Workflow,
	metrics *promMetrics, consumer string, logger zerolog.Logger) ([]*engine.Pipeline, *workflows, error) {
	pipelines, err := w.pipelines(ctx, selected)
	if err != nil {
		return nil, nil, err
	}
	wfs := newWorkflows(w, metrics, consumer, logger)
	wfPipes, err := wfs.build(ctx, wfSelected)
	if err != nil {
		return nil, nil, err
	}
	metrics.readRuns(wfs.activeCounts)
	return append(pipelines, wfPipes...), wfs, nil
}

// anyReadsStdin reports whether a selected pipeline or a workflow's start reads standard input.
func anyReadsStdin(selected []*config.Pipeline, wfs *workflows) bool {
	for _, p := range selected {
		if readsStdin(p) {
			return true
		}
	}
	for _, wf := range wfs.list() {
		if readsStdin(wf.cfg.Start) {
			return true
		}
	}
	return false
}
