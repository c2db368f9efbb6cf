// Package pipe is the pipe source (SPEC §2, §3): records (package codec) on an input stream,
// standard input in practice. Deliveries have no id; malformed lines are logged with their line
// number and skipped. Retry copies leave on the output stream under Options.OutRetry, dead
// letters under their dead-letter key, through the codec.LineWriter that record emits share, so
// lines never interleave. Settle is idempotent per delivery: a copy is written once.
package pipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// DefaultBatch is how many decoded records may wait ahead of the engine when Options.Batch is 0.
const DefaultBatch = 100

// Options configure a pipe source.
type Options struct {
	Key      string // records of this key only; "" = every key
	OutRetry string // the key retry copies are written under (out_retry)
	Batch    int    // records read ahead of the engine at most; 0 = DefaultBatch
}

// Source is the pipe source. Receive is called once: the input is consumed.
type Source struct {
	engine.ErrorHook // malformed records and failed reads count as source errors

	opts      Options
	in        io.Reader
	out       *codec.LineWriter
	log       zerolog.Logger
	malformed atomic.Int64
}

var _ engine.Source = (*Source)(nil)

// New returns a pipe source reading records from in and writing copies to out.
func New(opts Options, in io.Reader, out *codec.LineWriter, log zerolog.Logger) *Source {
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	return &Source{opts: opts, in: in, out: out, log: log}
}

// Capabilities: the input ends; nothing is acknowledged natively.
func (s *Source) Capabilities() engine.Capabilities { return engine.Capabilities{} }

// Malformed returns how many malformed lines were skipped so far.
func (s *Source) Malformed() int64 { return s.malformed.Load() }

type item struct {
	d   *engine.Delivery
	err error
}

// Receive hands the records of the input to feed and returns nil at its end. A read blocked on
// the input cannot be interrupted, so reading happens in a goroutine and Receive returns as
// soon as ctx ends; that goroutine finishes at the next line or the end of the input.
func (s *Source) Receive(ctx context.Context, feed engine.Feed) error {
	// Together with the record in the reader's hand, at most one batch runs ahead.
	items := make(chan item, s.opts.Batch-1)
	stop := make(chan struct{})
	defer close(stop)
	go s.read(items, stop)
	room := 0 // records the engine has room for before the next Room
	for {
		if room == 0 {
			// Take no more decoded records than the engine can take (engine.Feed); the reader
			// runs at most a batch ahead of them.
			if room = feed.Room(ctx); room == 0 {
				return ctx.Err()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case it, ok := <-items:
			if !ok {
				return nil
			}
			if it.err != nil {
				return it.err
			}
			room--
			if !feed.Push(ctx, []*engine.Delivery{it.d}) {
				return ctx.Err()
			}
		}
	}
}

// read decodes the input into items until its end (then closes items), a read error, or stop.
func (s *Source) read(items chan<- item, stop <-chan struct{}) {
	lr := codec.NewLineReader(s.in, codec.MaxLineSize)
	var n int64
	send := func(it item) bool {
		select {
		case items <- it:
			return true
		case <-stop:
			return false
		}
	}
	for {
		line, _, err := lr.Next()
		if errors.Is(err, io.EOF) {
			if lr.Pending() == 0 {
				close(items)
				return
			}
			line, _, err = lr.TakePending() // a last line without a newline
		} else if err != nil && !errors.Is(err, codec.ErrLineTooLong) {
			send(item{err: fmt.Errorf("pipe: read: %w", err)})
			return
		}
		n++
		if d := s.decode(n, line, err); d != nil && !send(item{d: d}) {
			return
		}
	}
}

// decode turns line n into a delivery, or nil when it is skipped.
func (s *Source) decode(n int64, line []byte, lineErr error) *engine.Delivery {
	if lineErr == nil && blank(line) {
		return nil
	}
	var m engine.Message
	if lineErr == nil {
		m, lineErr = codec.DecodeRecord(line)
	}
	if lineErr != nil {
		s.malformed.Add(1)
		s.ReportError()
		s.log.Warn().Int64("line", n).Err(lineErr).Msg("malformed record skipped")
		return nil
	}
	if s.opts.Key != "" && m.Key != s.opts.Key {
		return nil
	}
	return &engine.Delivery{Message: m, Token: &token{}}
}

func blank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// output is the Key of a fault: what fails is the output stream, whatever the record's key.
const output = "stdout"

// token is what Delivery.Token holds: whether the delivery's copy is written, so that a batch
// sent again after a failed write never writes a copy twice. Only Settle, on its one goroutine,
// writes it.
type token struct{ written bool }

// Settle writes the batch's copies, one write per copy, in order: retry copies under OutRetry,
// dead letters under their key (codec.RecordCopy, the switch the file source shares).
// Acknowledging is nothing on a pipe. A failed write is a fault
// of that delivery and of those after it (engine.SettleError); the copies written before it are
// marked on their tokens and never written again.
//
// Failures are classified as for every record output (codec.ClassifyWrite): a closed output
// (EPIPE: the reader has gone; os.ErrClosed) and a permission error are permanent: nothing
// written there will ever arrive, and the delivery has no acknowledgement to keep it. EAGAIN,
// ENOSPC or EIO when stdout is a file are transient: the engine writes it again with backoff.
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	var se engine.SettleError
	for i, st := range batch {
		command := "write"
		if st.Action != engine.ActRequeue && st.Action != engine.ActDeadLetter {
			command = st.Action.String()
		}
		if st.Action == engine.ActRequeue && s.opts.OutRetry == "" {
			se.Add(codec.WriteFault(i, command, output, fmt.Errorf("pipe: retry copy without out_retry: %w", engine.ErrUnsupported)))
			continue
		}
		c, err := codec.RecordCopy(st, s.opts.OutRetry)
		if err != nil {
			se.Add(codec.WriteFault(i, command, output, fmt.Errorf("pipe: %w", err)))
			continue
		}
		tok, _ := tokenOf(st.Delivery)
		if c == nil || (tok != nil && tok.written) {
			continue // nothing to write, or written by an earlier try
		}
		if err := s.out.WriteRecords(c); err != nil {
			// Stop at the first failed write, so copies keep their order on the output.
			err = fmt.Errorf("pipe: %w", err)
			for j := i; j < len(batch); j++ {
				if batch[j].Action != engine.ActAck {
					se.Add(codec.WriteFault(j, "write", output, err))
				}
			}
			break
		}
		if tok != nil {
			tok.written = true
		}
	}
	return se.Err()
}

func tokenOf(d *engine.Delivery) (*token, bool) {
	if d == nil {
		return nil, false
	}
	tok, ok := d.Token.(*token)
	return tok, ok
}

// Requeue writes runtime copies that came due under OutRetry, one write per copy. A failed
// write is an engine.SettleError naming (by index into msgs) the copies not written.
func (s *Source) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if s.opts.OutRetry == "" {
		return fmt.Errorf("pipe: retry copy without out_retry: %w", engine.ErrUnsupported)
	}
	for i, m := range msgs {
		c := *m
		c.Key = s.opts.OutRetry
		if err := s.out.WriteRecords(&c); err != nil {
			err = fmt.Errorf("pipe: %w", err)
			var se engine.SettleError
			for j := i; j < len(msgs); j++ {
				se.Add(codec.WriteFault(j, "write", output, err))
			}
			return se.Err()
		}
	}
	return nil
}

// Close does nothing: the input and output belong to the caller.
func (s *Source) Close() error { return nil }
