package redisrun

import (
	"context"
	"fmt"
	"time"

	"github.com/flowrun/flowrun/transports/redisconn"
)

// keepAliveChunk bounds the ids one keep-alive script handles.
const keepAliveChunk = 256

// startKeepAlive starts the keep-alive once; it outlives Receive (handlers still run and settle
// after reading stops) and ends at Close.
func (src *stepSource) startKeepAlive() {
	src.kaOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		src.kaStop, src.kaDone = cancel, make(chan struct{})
		go src.keepAlive(ctx)
	})
}

// keepAlive, every MinIdle/3, resets the idle time of the entries in flight here.
func (src *stepSource) keepAlive(ctx context.Context) {
	defer close(src.kaDone)
	t := time.NewTicker(max(src.o.MinIdle/3, 5*time.Millisecond))
	defer t.Stop()
	state := redisconn.NewStateLog(src.log, "workflow step keep-alive", src.secrets...)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := src.keepAliveOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			state.Fail(redisconn.RedactError(err, src.secrets...))
			continue
		}
		state.OK()
	}
}

func (src *stepSource) keepAliveOnce(ctx context.Context) error {
	src.mu.Lock()
	ids := make([]string, 0, len(src.inflight))
	for id := range src.inflight {
		ids = append(ids, id)
	}
	src.mu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), keepAliveChunk)
		args := make([]any, 0, 2+n)
		args = append(args, src.s.g.Name, src.o.Consumer)
		for _, id := range ids[:n] {
			args = append(args, id)
		}
		ids = ids[n:]
		other, err := keepAliveScript.Run(ctx, src.s.c, []string{src.stream}, args...).StringSlice()
		if err != nil {
			return fmt.Errorf("redisrun: keep-alive on %s: %w", src.stream, err)
		}
		for _, id := range other {
			src.log.Warn().Str("id", id).Msg("another consumer took over a step message still in flight here; its handler may run twice (the run still advances once)")
		}
	}
	return nil
}

// Close stops the keep-alive. Call it after Receive has returned and the last Settle is done.
func (src *stepSource) Close() error {
	src.kaOnce.Do(func() {}) // a keep-alive never started must not start after Close
	if src.kaStop != nil {
		src.kaStop()
		<-src.kaDone
		src.kaStop = nil
	}
	return nil
}
