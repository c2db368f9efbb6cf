package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/transports"
)

// defaultListLimit is how many dead letters `dlq list` shows without --limit.
const defaultListLimit = 10

// Widths of the truncated columns of `dlq list`, in characters.
const (
	reasonWidth  = 60
	payloadWidth = 80
)

const dlqUsage = `usage: flowrun dlq list|redrive PIPELINE [--limit N] [PATH...]
  list     show the pipeline's dead letters, oldest first (--limit default 10; 0: all)
  redrive  move dead letters back to the pipeline's source with their retry count reset
           (--limit default 0: all)
`

// cmdDLQ is `flowrun dlq list|redrive PIPELINE [--limit N] [PATH...]` (SPEC §1).
func cmdDLQ(ctx context.Context, args []string, stdio Stdio) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "redrive") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdio.Out, dlqUsage)
			return ExitOK
		}
		fmt.Fprint(stdio.Err, dlqUsage)
		return ExitConfig
	}
	sub := args[0]
	fs := newFlagSet("dlq "+sub, stdio)
	limit := fs.Int("limit", 0, "at most N dead letters (list: default 10; redrive: default all; 0: all)")
	pos, err := positionals(fs, args[1:])
	if err != nil {
		return flagExit(err)
	}
	limitSet := false
	fs.Visit(func(f *flag.Flag) { limitSet = limitSet || f.Name == "limit" })
	if len(pos) == 0 {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: missing PIPELINE\n%s", sub, dlqUsage)
		return ExitConfig
	}
	if *limit < 0 {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: --limit must be 0 or more\n", sub)
		return ExitConfig
	}
	name, paths := pos[0], pos[1:]
	if len(paths) == 0 {
		paths = []string{"."}
	}
	cfg := load(paths, config.Options{}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	p := cfg.Pipeline(name)
	if p == nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: no pipeline %q in the files loaded\n", sub, name)
		return ExitConfig
	}
	store, ok := p.Source.Config.(transports.DeadLetterStore)
	if !ok {
		whose := "whose dead letters dlq cannot reach"
		if l, ok := p.Source.Config.(transports.DeadLetterLocator); ok {
			whose = "whose dead letters are " + l.DeadLettersAt()
		}
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q has a %s source, %s; dlq supports %s sources\n",
			sub, name, p.Source.Kind, whose, hclutil.List(dlqKinds(), "and"))
		return ExitConfig
	}
	if p.DeadLetter == "" {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q has no dead_letter\n", sub, name)
		return ExitConfig
	}
	if sub == "redrive" {
		if err := store.CheckRedrive(); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun dlq redrive: pipeline %q %v\n", name, err)
			return ExitConfig
		}
	}

	conns := newAdminConns(cfg)
	defer conns.close()
	if p.Source.IsRedis() {
		if _, err := conns.get(ctx, p.Source.Redis); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun dlq %s: %v\n", sub, err)
			return ExitRuntime
		}
	}
	env := conns.env(ctx, p.Source.Redis)
	if sub == "list" {
		n := *limit
		if !limitSet {
			n = defaultListLimit
		}
		err = dlqList(ctx, store, env, p.DeadLetter, n, stdio.Out)
	} else {
		err = dlqRedrive(ctx, store, env, *limit, stdio.Out)
	}
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q: %v\n", sub, name, conns.redact(p.Source.Redis, err))
		return ExitRuntime
	}
	return ExitOK
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

// dlqList prints the dead letters of the key dlq, oldest first.
func dlqList(ctx context.Context, store transports.DeadLetterStore, env *transports.Env, dlq string, limit int, out io.Writer) error {
	rows, total, err := store.ListDeadLetters(ctx, env, limit)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no dead letters in %s\n", dlq)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFAILED-AT\tATTEMPTS\tORIGINAL-KEY\tORIGINAL-ID\tREASON\tPAYLOAD")
	for _, r := range rows {
		h := r.Message.Headers
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			cell(r.ID), cell(h[engine.HeaderFailedAt]), cell(h[engine.HeaderAttempts]),
			cell(h[engine.HeaderOriginalKey]), cell(h[engine.HeaderOriginalID]),
			clip(h[engine.HeaderDeadLetterReason], reasonWidth), clip(string(r.Message.Payload), payloadWidth))
	}
	tw.Flush()
	if int64(len(rows)) < total {
		fmt.Fprintf(out, "%d of %d dead letters in %s shown (oldest first); --limit 0 shows all\n", len(rows), total, dlq)
	}
	return nil
}

// clip makes s one readable table cell of at most width characters: control characters and
// invalid UTF-8 are escaped (as in Go source), and a longer text ends in "…".
func clip(s string, width int) string {
	if s == "" {
		return "-"
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
func dlqRedrive(ctx context.Context, store transports.DeadLetterStore, env *transports.Env, limit int, out io.Writer) error {
	moved, target, err := store.RedriveDeadLetters(ctx, env, limit)
	if moved > 0 || err == nil {
		fmt.Fprintf(out, "redrove %d dead letters to %s\n", moved, target)
	}
	return err
}
