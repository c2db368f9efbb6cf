package plugins

import (
	"context"
	"maps"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/schema"
)

func init() {
	Register(Spec[struct{}]{
		Name: "log",
		Body: &schema.Body{},
		Doc:  "logs each message at info and acknowledges it",
		Provision: func(_ context.Context, _ struct{}, env Env) (Handler, error) {
			return &logHandler{log: env.Logger}, nil
		},
	})
}

type logHandler struct{ log zerolog.Logger }

var _ Handler = (*logHandler)(nil)

func (h *logHandler) Handle(_ context.Context, m Message, _ *Emitter) (Outcome, error) {
	if ev := h.log.Info(); ev.Enabled() {
		ev.Str("key", m.Key()).
			Str("id", m.ID()).
			Int("attempt", m.Attempt()).
			Interface("headers", maps.Collect(m.Headers())).
			Str("payload", string(m.Payload())).
			Msg("message")
	}
	return Ack(), nil
}
