package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redislist"
	"github.com/flowrun/flowrun/transports/redisstream"
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
	if !p.Source.IsRedis() {
		where := map[string]string{config.KindFile: "in its stream file", config.KindPipe: "on standard output"}[p.Source.Kind]
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q has a %s source, whose dead letters are records %s, not in Redis; dlq supports stream, claiming, reclaim, list and pubsub sources\n",
			sub, name, p.Source.Kind, where)
		return ExitConfig
	}
	if p.DeadLetter == "" {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q has no dead_letter\n", sub, name)
		return ExitConfig
	}
	if sub == "redrive" && p.Source.Kind == config.KindPubSub && len(p.Source.Patterns) > 0 && p.RetryTo == "" {
		fmt.Fprintf(stdio.Err, "flowrun dlq redrive: pipeline %q subscribes to patterns and has no retry_to: no channel to publish its dead letters to\n", name)
		return ExitConfig
	}

	conns := newAdminConns(cfg)
	defer conns.close()
	c, err := conns.get(ctx, p.Source.Redis)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: %v\n", sub, err)
		return ExitRuntime
	}
	if sub == "list" {
		n := *limit
		if !limitSet {
			n = defaultListLimit
		}
		err = dlqList(ctx, c, p, n, stdio.Out)
	} else {
		err = dlqRedrive(ctx, c, p, *limit, stdio.Out)
	}
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun dlq %s: pipeline %q: %v\n", sub, name, conns.redact(p.Source.Redis, err))
		return ExitRuntime
	}
	return ExitOK
}

// deadLetterRow is one dead letter as `dlq list` shows it.
type deadLetterRow struct {
	id string // the stream entry id; "" for a list element
	m  *engine.Message
}

func dlqList(ctx context.Context, c redis.UniversalClient, p *config.Pipeline, limit int, out io.Writer) error {
	var (
		rows  []deadLetterRow
		total int64
	)
	if p.Source.Kind == config.KindList {
		dls, err := redislist.ReadDeadLetters(ctx, c, p.DeadLetter, limit)
		if err != nil {
			return err
		}
		for _, dl := range dls {
			rows = append(rows, deadLetterRow{m: dl.Message})
		}
		if total, err = c.LLen(ctx, p.DeadLetter).Result(); err != nil {
			return fmt.Errorf("llen %s: %w", p.DeadLetter, err)
		}
	} else {
		dls, err := redisstream.ReadDeadLetters(ctx, c, p.DeadLetter, limit)
		if err != nil {
			return err
		}
		for _, dl := range dls {
			rows = append(rows, deadLetterRow{id: dl.Message.ID, m: dl.Message})
		}
		if total, err = c.XLen(ctx, p.DeadLetter).Result(); err != nil {
			return fmt.Errorf("xlen %s: %w", p.DeadLetter, err)
		}
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no dead letters in %s\n", p.DeadLetter)
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFAILED-AT\tATTEMPTS\tORIGINAL-KEY\tORIGINAL-ID\tREASON\tPAYLOAD")
	for _, r := range rows {
		h := r.m.Headers
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			cell(r.id), cell(h[engine.HeaderFailedAt]), cell(h[engine.HeaderAttempts]),
			cell(h[engine.HeaderOriginalKey]), cell(h[engine.HeaderOriginalID]),
			clip(h[engine.HeaderDeadLetterReason], reasonWidth), clip(string(r.m.Payload), payloadWidth))
	}
	tw.Flush()
	if int64(len(rows)) < total {
		fmt.Fprintf(out, "%d of %d dead letters in %s shown (oldest first); --limit 0 shows all\n", len(rows), total, p.DeadLetter)
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

func dlqRedrive(ctx context.Context, c redis.UniversalClient, p *config.Pipeline, limit int, out io.Writer) error {
	s := p.Source
	var (
		moved  int
		err    error
		target string
	)
	switch {
	case s.IsStream():
		target = s.Stream
		moved, err = redisstream.Redrive(ctx, c, p.DeadLetter, s.Stream, limit)
	case s.Kind == config.KindList:
		target = s.Key
		moved, err = redislist.Redrive(ctx, c, p.DeadLetter, s.Key, limit)
	case s.Kind == config.KindPubSub:
		var used []string
		moved, used, err = redrivePubSub(ctx, c, p, limit)
		target = strings.Join(used, ",")
		if target == "" {
			target = sourceKey(s)
			if len(s.Patterns) > 0 {
				target = p.RetryTo
			}
		}
	default:
		return fmt.Errorf("dlq does not support %s sources", s.Kind)
	}
	if moved > 0 || err == nil {
		fmt.Fprintf(out, "redrove %d dead letters to %s\n", moved, target)
	}
	return err
}

// redrivePubSub publishes dead letters (a stream) back to their channels: x-original-key, or
// retry_to under patterns, one PUBLISH per letter, and deletes each letter only once a
// subscriber received it. A PUBLISH that reaches nobody is lost, so it stops there and the
// letter stays. In a Redis Cluster PUBLISH counts only the receivers on the node that took it,
// so there the count is not checked. It returns the channels it published to, sorted.
func redrivePubSub(ctx context.Context, c redis.UniversalClient, p *config.Pipeline, limit int) (int, []string, error) {
	_, cluster := c.(*redis.ClusterClient)
	used := map[string]bool{}
	moved, err := redisstream.RedriveWith(ctx, c, p.DeadLetter, limit, func(ctx context.Context, batch []redisstream.DeadLetter) (int, error) {
		for i, dl := range batch {
			ch := p.RetryTo
			if len(p.Source.Patterns) == 0 {
				ch = dl.Message.Headers[engine.HeaderOriginalKey]
				if ch == "" && len(p.Source.Channels) == 1 {
					ch = p.Source.Channels[0]
				}
			}
			if ch == "" {
				return i, fmt.Errorf("dead letter %s has no %s header, and the pipeline reads %d channels: cannot tell where it goes", dl.Message.ID, engine.HeaderOriginalKey, len(p.Source.Channels))
			}
			n, err := c.Publish(ctx, ch, codec.EncodeEnvelope(redisstream.RedriveCopy(dl.Message))).Result()
			if err != nil {
				return i, fmt.Errorf("publish %s: %w", ch, err)
			}
			if n == 0 && !cluster {
				return i, fmt.Errorf("no subscriber on channel %s: a message published now would be lost, so dead letter %s and the ones after it were left in %s; start the pipeline and redrive again", ch, dl.Message.ID, p.DeadLetter)
			}
			used[ch] = true
		}
		return len(batch), nil
	})
	chans := make([]string, 0, len(used))
	for ch := range used {
		chans = append(chans, ch)
	}
	slices.Sort(chans)
	return moved, chans, err
}
