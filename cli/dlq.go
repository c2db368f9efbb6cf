package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/mattn/go-isatty"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/transports"
)

// defaultListLimit is how many dead letters `dlq list` shows without --limit.
const defaultListLimit = 10

// Widths of the truncated columns of `dlq list`, in characters.
const (
	reasonWidth  = 60
	payloadWidth = 80
)

const dlqUsage = `usage: flowrun dlq list|redrive|purge PIPELINE [--limit N] [--where EXPR] [PATH...]
  list     show the pipeline's dead letters, oldest first (--limit default 10; 0: all);
           --json prints one JSON object per letter, --full whole payloads
  redrive  move dead letters back to the pipeline's source with their retry count reset
           (--limit default 0: all); a workflow's: resume each letter's run at its failed step
  purge    delete dead letters (--limit default 0: all); asks first unless --yes
  --where EXPR  only the letters for which the expr-lang expression is true: the rules'
           environment (payload, raw, headers, key, id, attempt, ...) plus reason and failed_at
`

// cmdDLQ is `flowrun dlq list|redrive|purge PIPELINE [--limit N] [--where EXPR] [PATH...]`
// (SPEC §1).
func cmdDLQ(ctx context.Context, args []string, stdio Stdio) int {
	a, code := parseDLQArgs(args, stdio)
	if a == nil {
		return code
	}
	cfg := load(a.paths, config.Options{}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	if wf := cfg.Workflow(a.name); wf != nil {
		return dlqWorkflow(ctx, a, cfg, wf, stdio)
	}
	p, store, code := dlqPipeline(a, cfg, stdio)
	if p == nil {
		return code
	}
	conns := newAdminConns(cfg)
	defer conns.close()
	if p.Source.Redis != "" { // its block takes "redis" (transports.RedisBlockReader)
		if _, err := conns.get(ctx, p.Source.Redis); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun dlq %s: %v\n", a.sub, err)
			return ExitRuntime
		}
	}
	env := conns.env(ctx, p.Source.Redis)
	code, err := a.run(ctx, store, env, p.DeadLetter, stdio)
	if err == nil && code != ExitOK {
		return code
	}
	a.filter.warn(stdio.Err, a.sub)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q: %v\n", a.sub, a.name, conns.redact(p.Source.Redis, err))
		return ExitRuntime
	}
	return ExitOK
}

// dlqArgs is a parsed `flowrun dlq` command line.
type dlqArgs struct {
	sub      string // list, redrive or purge
	name     string // the pipeline
	paths    []string
	limit    int
	limitSet bool
	filter   *dlqFilter // nil without --where
	asJSON   bool       // list --json
	full     bool       // list --full
	yes      bool       // purge --yes
}

// parseDLQArgs parses the command line, or says what is wrong with it and returns nil and the
// exit code.
func parseDLQArgs(args []string, stdio Stdio) (*dlqArgs, int) {
	if len(args) == 0 || (args[0] != "list" && args[0] != "redrive" && args[0] != "purge") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdio.Out, dlqUsage)
			return nil, ExitOK
		}
		fmt.Fprint(stdio.Err, dlqUsage)
		return nil, ExitConfig
	}
	a := &dlqArgs{sub: args[0]}
	fs := newFlagSet("dlq "+a.sub, stdio)
	fs.IntVar(&a.limit, "limit", 0, "at most N dead letters (list: default 10; redrive, purge: default all; 0: all)")
	where := fs.String("where", "", "only the dead letters for which this expr-lang expression is true")
	switch a.sub {
	case "list":
		fs.BoolVar(&a.asJSON, "json", false, "print one JSON object per dead letter")
		fs.BoolVar(&a.full, "full", false, "show whole payloads instead of cutting them")
	case "purge":
		fs.BoolVar(&a.yes, "yes", false, "delete without asking")
	}
	pos, err := positionals(fs, args[1:])
	if err != nil {
		return nil, flagExit(err)
	}
	whereSet := false
	fs.Visit(func(f *flag.Flag) {
		a.limitSet = a.limitSet || f.Name == "limit"
		whereSet = whereSet || f.Name == "where"
	})
	if len(pos) == 0 {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: missing PIPELINE\n%s", a.sub, dlqUsage)
		return nil, ExitConfig
	}
	if a.limit < 0 {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: --limit must be 0 or more\n", a.sub)
		return nil, ExitConfig
	}
	// The filter is compiled before anything is loaded or connected: a typo costs nothing.
	if whereSet {
		f, err := rules.CompileFilter(*where)
		if err != nil {
			fmt.Fprintf(stdio.Err, "flowrun dlq %s: --where:%v\n", a.sub, err)
			return nil, ExitConfig
		}
		a.filter = &dlqFilter{f: f}
	}
	a.name, a.paths = pos[0], pos[1:]
	if len(a.paths) == 0 {
		a.paths = []string{"."}
	}
	return a, ExitOK
}

// dlqPipeline finds the pipeline whose dead letters the command works on, or says why it
// cannot and returns a nil pipeline and the exit code. Everything it checks needs no
// connection.
func dlqPipeline(a *dlqArgs, cfg *config.Config, stdio Stdio) (*config.Pipeline, transports.DeadLetterStore, int) {
	p := cfg.Pipeline(a.name)
	if p == nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: no pipeline %q in the files loaded (nor a workflow)\n", a.sub, a.name)
		return nil, nil, ExitConfig
	}
	store, ok := p.Source.Config.(transports.DeadLetterStore)
	if !ok {
		whose := "whose dead letters dlq cannot reach"
		if l, ok := p.Source.Config.(transports.DeadLetterLocator); ok {
			whose = "whose dead letters are " + l.DeadLettersAt()
		}
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q has a %s source, %s; dlq supports %s sources\n",
			a.sub, a.name, p.Source.Kind, whose, hclutil.List(dlqKinds(), "and"))
		return nil, nil, ExitConfig
	}
	if p.DeadLetter == "" {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q has no dead_letter\n", a.sub, a.name)
		return nil, nil, ExitConfig
	}
	if a.sub == "redrive" {
		if err := store.CheckRedrive(); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun dlq redrive: pipeline %q %v\n", a.name, err)
			return nil, nil, ExitConfig
		}
	}
	if code := a.checkPurge(stdio); code != ExitOK {
		return nil, nil, code
	}
	return p, store, ExitOK
}

// checkPurge refuses a purge before connecting: a script that forgot --yes learns it without
// Redis.
func (a *dlqArgs) checkPurge(stdio Stdio) int {
	if a.sub == "purge" && !a.yes && !isTerminal(stdio.In) {
		fmt.Fprintf(stdio.Err, "flowrun dlq purge: standard input is not a terminal, so there is no one to ask; pass --yes to delete the dead letters of %s without asking\n", a.name)
		return ExitConfig
	}
	return ExitOK
}

// run runs the subcommand on the dead-letter key dlq; a code other than ExitOK with a nil
// error is an answer (purge declined), not a failure.
func (a *dlqArgs) run(ctx context.Context, store transports.DeadLetterStore, env *transports.Env, dlq string, stdio Stdio) (int, error) {
	q := transports.DeadLetterQuery{Limit: a.limit}
	if a.filter != nil {
		q.Match = a.filter.match
	}
	switch a.sub {
	case "list":
		if !a.limitSet {
			q.Limit = defaultListLimit
		}
		if a.asJSON {
			return ExitOK, dlqListJSON(ctx, store, env, dlq, q, stdio.Out, stdio.Err)
		}
		width := payloadWidth
		if a.full {
			width = 0
		}
		return ExitOK, dlqList(ctx, store, env, dlq, q, width, stdio.Out)
	case "redrive":
		return ExitOK, dlqRedrive(ctx, store, env, q, stdio.Out)
	case "purge":
		return dlqPurge(ctx, store, env, a.name, dlq, q, !a.yes, stdio)
	}
	return ExitOK, nil
}

// dlqFilter is a compiled --where. A letter on which it fails to evaluate (payload.amount on a
// letter whose payload is text) does not match: dead letters are the odd ones out, so one of
// them must not stop a command; failed counts them and first keeps the first error.
type dlqFilter struct {
	f      *rules.Filter
	failed int
	first  string
}

func (d *dlqFilter) match(m *engine.Message) (bool, error) {
	ok, err := d.f.Match(m)
	if err != nil {
		d.failed++
		if d.first == "" {
			var ee *rules.EvalError
			if errors.As(err, &ee) {
				d.first = fmt.Sprintf("%d:%d: %s", ee.Line, ee.Column, ee.Message)
			} else {
				d.first = err.Error()
			}
		}
		return false, nil
	}
	return ok, nil
}

// warn says on w how many letters the filter failed on.
func (d *dlqFilter) warn(w io.Writer, sub string) {
	if d != nil && d.failed > 0 {
		fmt.Fprintf(w, "flowrun dlq %s: warning: --where failed on %d dead letters, which count as not matching (the first: --where:%s)\n", sub, d.failed, d.first)
	}
}

// isTerminal reports whether r is a terminal that a question can be asked on.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// dlqKinds lists the source kinds whose dead letters dlq reaches, in their order.
func dlqKinds() []string {
	var names []string
	for _, k := range transports.Kinds() {
		if _, ok := k.New().(transports.DeadLetterStore); ok {
			names = append(names, k.Name)
		}
	}
	return names
}

// dlqList prints the dead letters of the key dlq that q selects, oldest first, as a table whose
// payloads are cut at width characters (0: whole).
func dlqList(ctx context.Context, store transports.DeadLetterStore, env *transports.Env, dlq string, q transports.DeadLetterQuery, width int, out io.Writer) error {
	rows, total, err := store.ListDeadLetters(ctx, env, q)
	if err != nil {
		return err
	}
	matching := ""
	if q.Match != nil {
		matching = " matching --where"
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no dead letters%s in %s\n", matching, dlq)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFAILED-AT\tATTEMPTS\tORIGINAL-KEY\tORIGINAL-ID\tREASON\tPAYLOAD")
	for _, r := range rows {
		h := r.Message.Headers
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			cell(r.ID), cell(h[engine.HeaderFailedAt]), cell(h[engine.HeaderAttempts]),
			cell(h[engine.HeaderOriginalKey]), cell(h[engine.HeaderOriginalID]),
			clip(h[engine.HeaderDeadLetterReason], reasonWidth), clip(string(r.Message.Payload), width))
	}
	tw.Flush()
	if int64(len(rows)) < total {
		fmt.Fprintf(out, "%d of %d dead letters%s in %s shown (oldest first); --limit 0 shows all\n", len(rows), total, matching, dlq)
	}
	return nil
}

// dlqLetter is one dead letter as `dlq list --json` prints it.
type dlqLetter struct {
	ID       *string           `json:"id"`  // the letter's own id; null for a list's
	Key      string            `json:"key"` // x-original-key, or the dead-letter key without it
	Headers  map[string]string `json:"headers"`
	Payload  any               `json:"payload"` // the JSON value when the payload is JSON, else a string
	Reason   *string           `json:"reason"`
	FailedAt *string           `json:"failed_at"`
}

// dlqListJSON prints one JSON object per dead letter that q selects, oldest first; a note on
// letters not shown goes to errOut so that out stays JSON lines.
func dlqListJSON(ctx context.Context, store transports.DeadLetterStore, env *transports.Env, dlq string, q transports.DeadLetterQuery, out, errOut io.Writer) error {
	rows, total, err := store.ListDeadLetters(ctx, env, q)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		m := r.Message
		h := m.Headers
		if h == nil {
			h = map[string]string{}
		}
		l := dlqLetter{Key: m.Key, Headers: h, Payload: string(m.Payload)}
		if r.ID != "" {
			l.ID = &r.ID
		}
		if k := h[engine.HeaderOriginalKey]; k != "" {
			l.Key = k
		}
		if v, ok := h[engine.HeaderDeadLetterReason]; ok {
			l.Reason = &v
		}
		if v, ok := h[engine.HeaderFailedAt]; ok {
			l.FailedAt = &v
		}
		if json.Valid(m.Payload) {
			l.Payload = json.RawMessage(m.Payload)
		}
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	if int64(len(rows)) < total {
		fmt.Fprintf(errOut, "%d of %d dead letters in %s shown (oldest first); --limit 0 shows all\n", len(rows), total, dlq)
	}
	return nil
}

// clip makes s one readable table cell of at most width characters: control characters and
// invalid UTF-8 are escaped (as in Go source), and a longer text ends in "…".
func clip(s string, width int) string {
	if s == "" {
		return "-"
	}
	if width <= 0 {
		width = len(s) * 4 // whole: no escape is longer than 4 characters
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size == 1:
			piece = fmt.Sprintf(`\x%02x`, s[i])
		case r == '\n':
			piece = `\n`
		case r == '\r':
			piece = `\r`
		case r == '\t':
			piece = `\t`
		case r < 0x20 || r == 0x7f:
			piece = fmt.Sprintf(`\x%02x`, r)
		default:
			piece = string(r)
		}
		w := utf8.RuneCountInString(piece)
		if n+w > width-1 && i+size < len(s) || n+w > width {
			b.WriteString("…")
			return b.String()
		}
		b.WriteString(piece)
		n += w
		i += size
	}
	return b.String()
}

// dlqRedrive moves dead letters back to the source and says how many went where.
func dlqRedrive(ctx context.Context, store transports.DeadLetterStore, env *transports.Env, q transports.DeadLetterQuery, out io.Writer) error {
	moved, target, err := store.RedriveDeadLetters(ctx, env, q)
	if moved > 0 || err == nil {
		fmt.Fprintf(out, "redrove %d dead letters to %s\n", moved, target)
	}
	return err
}

// dlqPurge deletes the dead letters q selects, after asking on the terminal when ask is set
// (the caller has made sure stdio.In is one). It returns ExitConfig when the answer is no.
func dlqPurge(ctx context.Context, store transports.DeadLetterStore, env *transports.Env, name, dlq string, q transports.DeadLetterQuery, ask bool, stdio Stdio) (int, error) {
	if ask {
		_, total, err := store.ListDeadLetters(ctx, env, transports.DeadLetterQuery{Limit: 1, Match: q.Match})
		if err != nil {
			return ExitRuntime, err
		}
		n := total
		if q.Limit > 0 {
			n = min(n, int64(q.Limit))
		}
		if n == 0 {
			fmt.Fprintf(stdio.Out, "deleted 0 dead letters from %s\n", dlq)
			return ExitOK, nil
		}
		fmt.Fprintf(stdio.Err, "delete %d dead letters of %s? [y/N] ", n, name)
		answer, _ := bufio.NewReader(stdio.In).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			fmt.Fprintln(stdio.Err, "nothing deleted")
			return ExitConfig, nil
		}
	}
	deleted, err := store.PurgeDeadLetters(ctx, env, q)
	if deleted > 0 || err == nil {
		fmt.Fprintf(stdio.Out, "deleted %d dead letters from %s\n", deleted, dlq)
	}
	return ExitOK, err
}
