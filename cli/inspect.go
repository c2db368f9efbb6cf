package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// adminPingTimeout bounds how long inspect and dlq wait for a Redis server before they give up
// with exit 2: unlike run, they answer a person now, and must not wait for a server to return.
const adminPingTimeout = 3 * time.Second

// inspectRow is one pipeline's line of `flowrun inspect` (SPEC §1). A nil number does not apply
// to the source (or, for Lag, Redis cannot tell): "-" in the table, null in JSON.
type inspectRow struct {
	Pipeline string `json:"pipeline"`
	Source   string `json:"source"` // the source kind
	Key      string `json:"key"`    // what the source reads: a stream, a list, channels, a file, "stdin"
	Group    string `json:"group,omitempty"`

	Length              *int64  `json:"length"`
	Lag                 *int64  `json:"lag"`
	Pending             *int64  `json:"pending"`
	OldestPendingIdleMS *int64  `json:"oldest_pending_idle_ms"`
	Processing          string  `json:"processing,omitempty"` // reliable list: the list Pending counts
	DelayKey            string  `json:"delay_key,omitempty"`
	Delayed             *int64  `json:"delayed"`
	NextDue             *string `json:"next_due"`            // RFC 3339
	NextTick            *string `json:"next_tick,omitempty"` // a schedule source's, RFC 3339
	DeadLetter          string  `json:"dead_letter,omitempty"`
	DeadLetters         *int64  `json:"dead_letters"`

	lagUnknown bool // the group exists, but Redis cannot tell its lag: "?" in the table
}

func cmdInspect(ctx context.Context, args []string, stdio Stdio) int {
	fs := newFlagSet("inspect", stdio)
	var (
		pipelines stringsFlag
		consumer  string
		asJSON    bool
	)
	fs.Var(&pipelines, "pipeline", "inspect only this pipeline or workflow (repeatable; default all)")
	fs.StringVar(&consumer, "consumer", "", "consumer name for every source, as with run (picks a reliable list's processing list)")
	fs.BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	paths, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	cfg := load(paths, config.Options{Consumer: consumer}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	selected := cfg.Pipelines
	if len(pipelines) > 0 {
		selected = nil
		for _, name := range pipelines {
			p := cfg.Pipeline(name)
			if p == nil && cfg.Workflow(name) != nil {
				continue // selectWorkflows selects it
			}
			if p == nil {
				fmt.Fprintf(stdio.Err, "flowrun inspect: no pipeline %q in the files loaded (nor a workflow)\n", name)
				return ExitConfig
			}
			selected = append(selected, p)
		}
	}
	wfs := selectWorkflows(cfg, pipelines)

	conns := newAdminConns(cfg)
	defer conns.close()
	for _, b := range inspectBlocks(selected, wfs) {
		if _, err := conns.get(ctx, b); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun inspect: %v\n", err)
			return ExitRuntime
		}
	}

	code := ExitOK
	rows := make([]inspectRow, 0, len(selected))
	for _, p := range selected {
		row, err := inspectPipeline(ctx, conns, p)
		if err != nil {
			fmt.Fprintf(stdio.Err, "flowrun inspect: pipeline %q: %v\n", p.Name, err)
			code = ExitRuntime
		}
		rows = append(rows, row)
	}
	wrows := make([]workflowRow, 0, len(wfs))
	for _, wf := range wfs {
		row, start, err := inspectWorkflow(ctx, conns, wf)
		if err != nil {
			fmt.Fprintf(stdio.Err, "flowrun inspect: workflow %q: %v\n", wf.Name, err)
			code = ExitRuntime
		}
		rows = append(rows, start)
		waits, err := inspectWaits(ctx, conns, wf)
		if err != nil {
			fmt.Fprintf(stdio.Err, "flowrun inspect: workflow %q: %v\n", wf.Name, err)
			code = ExitRuntime
		}
		rows = append(rows, waits...)
		wrows = append(wrows, row)
	}
	if asJSON {
		all := make([]any, 0, len(rows)+len(wrows))
		for _, r := range rows {
			all = append(all, r)
		}
		for _, r := range wrows {
			all = append(all, r)
		}
		enc := json.NewEncoder(stdio.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(all); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun inspect: %v\n", err)
			return ExitRuntime
		}
		return code
	}
	writeInspectTable(stdio.Out, rows)
	writeWorkflowTables(stdio.Out, wrows)
	return code
}

// inspectBlocks are the redis blocks inspect reads: the selected pipelines' sources', the
// workflows' own and their start sources'.
func inspectBlocks(ps []*config.Pipeline, wfs []*config.Workflow) []string {
	var out []string
	seen := map[string]bool{}
	add := func(b string) {
		if b != "" && !seen[b] { // "": a source whose block takes no "redis"
			seen[b] = true
			out = append(out, b)
		}
	}
	for _, p := range ps {
		add(p.Source.Redis)
	}
	for _, wf := range wfs {
		add(wf.Redis)
		add(wf.Start.Source.Redis)
		for _, b := range waitBlocks(wf) {
			add(b)
		}
	}
	return out
}

// inspectPipeline reads one pipeline's numbers through its source's kind (transports.Inspector).
// On an error it returns what it has so far.
func inspectPipeline(ctx context.Context, conns *adminConns, p *config.Pipeline) (inspectRow, error) {
	s := p.Source
	row := inspectRow{Pipeline: p.Name, Source: s.Kind}
	in, ok := s.Config.(transports.Inspector)
	if !ok {
		return row, nil
	}
	st, err := in.Inspect(ctx, conns.env(ctx, s.Redis))
	row.Key, row.Group = st.Key, st.Group
	row.Length, row.Lag, row.Pending, row.lagUnknown = st.Length, st.Lag, st.Pending, st.LagUnknown
	if st.OldestPendingIdle != nil {
		row.OldestPendingIdleMS = ptrTo(st.OldestPendingIdle.Milliseconds())
	}
	row.Processing, row.DelayKey, row.Delayed = st.Processing, st.DelayKey, st.Delayed
	if st.NextDue != nil {
		row.NextDue = ptrTo(st.NextDue.UTC().Format(time.RFC3339))
	}
	if st.NextTick != nil {
		row.NextTick = ptrTo(st.NextTick.UTC().Format(time.RFC3339))
	}
	row.DeadLetter, row.DeadLetters = st.DeadLetter, st.DeadLetters
	return row, conns.redact(s.Redis, err)
}

func ptrTo[T any](v T) *T { return &v }

func writeInspectTable(w io.Writer, rows []inspectRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tSOURCE\tKEY\tLENGTH\tLAG\tPENDING\tOLDEST-IDLE\tDELAYED\tNEXT-DUE\tDEAD-LETTERS")
	for _, r := range rows {
		lag := num(r.Lag)
		if r.lagUnknown {
			lag = "?"
		}
		idle := "-"
		if r.OldestPendingIdleMS != nil {
			idle = formatIdle(time.Duration(*r.OldestPendingIdleMS) * time.Millisecond)
		}
		due := "-"
		if r.NextDue != nil {
			due = *r.NextDue
		} else if r.NextTick != nil { // a schedule: when its next message is due
			due = *r.NextTick
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			cell(r.Pipeline), r.Source, cell(r.Key), num(r.Length), lag, num(r.Pending), idle,
			num(r.Delayed), due, num(r.DeadLetters))
	}
	tw.Flush()
}

func num(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

// formatIdle rounds an idle time to what a person reads: milliseconds under a second, else
// whole seconds ("1h2m3s").
func formatIdle(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// cell makes a name safe for one table cell: an empty one reads "-", and tabs and line breaks,
// which would break the columns, are escaped.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(s)
}

// adminConns holds the Redis clients of inspect and dlq, one per redis block, each checked with
// a PING bounded by adminPingTimeout when first asked for.
type adminConns struct {
	cfg     *config.Config
	clients map[string]redis.UniversalClient
	secrets map[string][]string
}

func newAdminConns(cfg *config.Config) *adminConns {
	// go-redis prints its own dial failures on stderr otherwise; the error we return says it all.
	redisconn.SetDriverLogger(zerolog.Nop())
	return &adminConns{cfg: cfg, clients: map[string]redis.UniversalClient{}, secrets: map[string][]string{}}
}

// get returns the redis block's client, connecting on first use. Its errors name the block and
// never contain a password.
func (a *adminConns) get(ctx context.Context, name string) (redis.UniversalClient, error) {
	if c, ok := a.clients[name]; ok {
		return c, nil
	}
	c, pingErr, err := openRedis(ctx, a.cfg, name, adminPingTimeout)
	if err != nil {
		return nil, err
	}
	if pingErr != nil {
		c.Close()
		return nil, pingErr
	}
	a.clients[name] = c
	a.secrets[name] = redisOptions(a.cfg.RedisBlock(name)).Secrets()
	return c, nil
}

// env is what a source's kind gets for inspect and dlq: these clients, connected under ctx.
func (a *adminConns) env(ctx context.Context, redisBlock string) *transports.Env {
	return &transports.Env{
		Logger:     zerolog.Nop(),
		RedisBlock: redisBlock,
		Redis:      func(name string) (redis.UniversalClient, error) { return a.get(ctx, name) },
		OnClose:    func(func() error) {},
	}
}

// redact removes the block's passwords from err.
func (a *adminConns) redact(name string, err error) error {
	if err == nil {
		return nil
	}
	return redisconn.RedactError(err, a.secrets[name]...)
}

func (a *adminConns) close() {
	for _, c := range a.clients {
		c.Close()
	}
}
