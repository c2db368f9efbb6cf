package redisrun

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/streamdlq"
	"github.com/flowrun/flowrun/workflow"
)

// DeadLetterKey is the stream the workflow's failed step messages go to (SPEC §16): the
// configured dead letter, else flowrun:{<workflow>}:dead.
func (s *Store) DeadLetterKey() string {
	if s.DeadLetter != "" {
		return s.DeadLetter
	}
	return s.k.dead()
}

// DeadLetters returns up to limit (0: all) of the workflow's dead letters that match selects
// (nil: all), oldest first, and how many match in all (flowrun dlq list). Each carries x-run-id.
func (s *Store) DeadLetters(ctx context.Context, limit int, match streamdlq.Match) ([]streamdlq.DeadLetter, int64, error) {
	return streamdlq.Scan(ctx, s.c, s.DeadLetterKey(), limit, match)
}

// Redrive resumes the failed runs of up to limit dead letters (limit <= 0: all there when it
// starts) that match selects (flowrun dlq redrive): for each, oldest first, Retry of the run its
// x-run-id names, then the letter is deleted. A letter of a run that is not failed any more (it
// was resumed already, by runs retry or an earlier letter) is only deleted. It stops at the first
// run that cannot be retried (compensated, gone), naming it; the letters before are redriven. It
// returns how many it redrove.
func (s *Store) Redrive(ctx context.Context, limit int, match streamdlq.Match) (int, error) {
	return streamdlq.RedriveWith(ctx, s.c, s.DeadLetterKey(), limit, match, func(ctx context.Context, batch []streamdlq.DeadLetter) (int, error) {
		for i, dl := range batch {
			id := dl.Message.Headers[engine.HeaderRunID]
			if id == "" {
				return i, fmt.Errorf("redisrun: dead letter %s names no run (no x-run-id)", dl.Message.ID)
			}
			if err := s.Retry(ctx, id); err != nil && !s.resumed(ctx, id, err) {
				return i, fmt.Errorf("redisrun: redrive dead letter %s: %w", dl.Message.ID, err)
			}
		}
		return len(batch), nil
	})
}

// resumed reports whether Retry's err is for a run that is no longer failed, so its dead letter
// has nothing left to resume.
func (s *Store) resumed(ctx context.Context, id string, err error) bool {
	if !errors.Is(err, workflow.ErrNotRetryable) {
		return false
	}
	st, gerr := s.Get(ctx, id)
	return gerr == nil && st.Status != workflow.Failed
}
