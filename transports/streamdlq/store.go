package streamdlq

import (
	"context"

	"github.com/flowrun/flowrun/transports"
)

// Store is the part of transports.DeadLetterStore and DeadLetterPager that every source whose
// dead letters are the stream Key shares: list, purge and page, each on the client of the
// source's redis block. Redrive is the source's own (back to a stream, or published to
// channels).
type Store struct{ Key string }

// ListDeadLetters is ListDeadLetters on env's client.
func (s Store) ListDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) ([]transports.DeadLetter, int64, error) {
	client, err := env.Client()
	if err != nil {
		return nil, 0, err
	}
	return ListDeadLetters(ctx, client, s.Key, q)
}

// PurgeDeadLetters is Purge on env's client.
func (s Store) PurgeDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) (int, error) {
	client, err := env.Client()
	if err != nil {
		return 0, err
	}
	return Purge(ctx, client, s.Key, q.Limit, q.Match)
}

// PageDeadLetters is PageDeadLetters on env's client.
func (s Store) PageDeadLetters(ctx context.Context, env *transports.Env, newest bool, offset, limit int) ([]transports.DeadLetter, int64, error) {
	client, err := env.Client()
	if err != nil {
		return nil, 0, err
	}
	return PageDeadLetters(ctx, client, s.Key, newest, offset, limit)
}
