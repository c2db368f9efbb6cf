package plugins

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

func init() {
	Register(Plugin{
		Name: "log",
		Doc:  "logs each message at info and acknowledges it",
		New: func(_ context.Context, _ any, env Env) (engine.Handler, error) {
			return &logHandler{log: env.Logger}, nil
		},
	})
}

type logHandler struct{ log zerolog.Logger }

var _ engine.Handler = (*logHandler)(nil)

func (h *logHandler) Handle(_ context.Context, d *engine.Delivery) engine.Result {
	h.log.Info().
		Str("key", d.Key).
		Str("id", d.ID).
		Int("attempt", d.Attempt).
		Interface("headers", d.Headers).
		Str("payload", string(d.Payload)).
		Msg("message")
	return engine.Result{Outcome: engine.Ack()}
}
