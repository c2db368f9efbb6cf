package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/transports/redisstream"
)

// adminPingTimeout bounds how long inspect and dlq wait for a Redis server before they give up
// with exit 2: unlike run, they answer a person now, and must not wait for a server to return.
const adminPingTimeout = 3 * time.Second

// inspectRow is one pipeline's line of `flowrun inspect` (SPEC §1). A nil number does not apply
// to the source (or, for Lag, Redis cannot tell): "-" in the table, null in JSON.
type inspectRow struct {
	Pipeline string `json:"pipeline"`
	Source   string `json:"source"` // the source kind
	Key      string `json:"key"`    // stream, list, channels or patterns, file path, "stdin"
	Group    string `json:"group,omitempty"`

	Length              *int64  `json:"length"`
	Lag                 *int64  `json:"lag"`
	Pending             *int64  `json:"pending"`
	OldestPendingIdleMS *int64  `json:"oldest_pending_idle_ms"`
	Processing          string  `json:"processing,omitempty"` // reliable list: the list Pending counts
	DelayKey            string  `json:"delay_key,omitempty"`
	Delayed             *int64  `json:"delayed"`
	NextDue             *string `json:"next_due"` // RFC 3339
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
	fs.Var(&pipelines, "pipeline", "inspect only this pipeline (repeatable; default all)")
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
			if p == nil {
				fmt.Fprintf(stdio.Err, "flowrun inspect: no pipeline %q in the files loaded\n", name)
				return ExitConfig
			}
			selected = append(selected, p)
		}
	}

	conns := newAdminConns(cfg)
	defer conns.close()
	for _, p := range selected {
		if p.Source.IsRedis() {
			if _, err := conns.get(ctx, p.Source.Redis); err != nil {
				fmt.Fprintf(stdio.Err, "flowrun inspect: %v\n", err)
				return ExitRuntime
			}
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
	if asJSON {
		enc := json.NewEncoder(stdio.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun inspect: %v\n", err)
			return ExitRuntime
		}
		return code
	}
	writeInspectTable(stdio.Out, rows)
	return code
}

// inspectPipeline reads one pipeline's numbers. On an error it returns what it has so far.
func inspectPipeline(ctx context.Context, conns *adminConns, p *config.Pipeline) (inspectRow, error) {
	s := p.Source
	row := inspectRow{Pipeline: p.Name, Source: s.Kind, Key: sourceKey(s)}
	if !s.IsRedis() {
		return row, nil // file and pipe: nothing in Redis to count (see the README)
	}
	c, err := conns.get(ctx, s.Redis)
	if err != nil {
		return row, err
	}
	err = inspectRedis(ctx, c, p, &row)
	return row, conns.redact(s.Redis, err)
}

// inspectRedis fills row with a Redis source's numbers.
func inspectRedis(ctx context.Context, c redis.UniversalClient, p *config.Pipeline, row *inspectRow) error {
	s := p.Source
	switch {
	case s.IsStream():
		row.Group = s.Group
		st, err := redisstream.ReadStats(ctx, c, s.Stream, s.Group)
		if err != nil {
			return err
		}
		row.Length = &st.Length
		row.Pending = ptrTo(int64(0))
		if st.GroupExists {
			row.Pending = &st.Pending
			if st.Lag >= 0 {
				row.Lag = &st.Lag
			} else {
				row.lagUnknown = true
			}
			if st.Pending > 0 {
				row.OldestPendingIdleMS = ptrTo(st.OldestIdle.Milliseconds())
			}
		}
		if p.DelayedRetry == config.DelayedRetryDurableZSet && p.DelayKey != "" {
			row.DelayKey = p.DelayKey
			d, err := redisstream.ReadDelayStats(ctx, c, p.DelayKey)
			if err != nil {
				return err
			}
			row.Delayed = &d.Size
			if !d.NextDue.IsZero() {
				row.NextDue = ptrTo(d.NextDue.UTC().Format(time.RFC3339))
			}
		}
	case s.Kind == config.KindList:
		n, err := c.LLen(ctx, s.Key).Result()
		if err != nil {
			return fmt.Errorf("llen %s: %w", s.Key, err)
		}
		row.Length = &n
		if s.Reliable && s.Processing != "" {
			row.Processing = s.Processing
			n, err := c.LLen(ctx, s.Processing).Result()
			if err != nil {
				return fmt.Errorf("llen %s: %w", s.Processing, err)
			}
			row.Pending = &n
		}
	}

	if p.DeadLetter != "" {
		row.DeadLetter = p.DeadLetter
		var (
			n   int64
			err error
		)
		if s.Kind == config.KindList {
			n, err = c.LLen(ctx, p.DeadLetter).Result()
		} else { // stream sources and pubsub dead-letter to a stream (SPEC §5)
			n, err = c.XLen(ctx, p.DeadLetter).Result()
		}
		if err != nil {
			return fmt.Errorf("dead letters %s: %w", p.DeadLetter, err)
		}
		row.DeadLetters = &n
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// sourceKey names what a source reads, for the KEY column.
func sourceKey(s *config.Source) string {
	switch s.Kind {
	case config.KindStream, config.KindClaiming, config.KindReclaim:
		return s.Stream
	case config.KindList:
		return s.Key
	case config.KindPubSub:
		if len(s.Patterns) > 0 {
			return strings.Join(s.Patterns, ",")
		}
		return strings.Join(s.Channels, ",")
	case config.KindFile:
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, s.Path); err == nil && !strings.HasPrefix(rel, "..") {
				return rel
			}
		}
		return s.Path
	case config.KindPipe:
		return "stdin"
	}
	return ""
}

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
