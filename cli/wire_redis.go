package cli

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
)

func (w *wiring) redisSource(p *config.Pipeline, _ zerolog.Logger) (engine.Source, error) {
	return nil, fmt.Errorf("source %q is not available in this build yet", p.Source.Kind)
}

func (w *wiring) redisSink(t engine.Target) (engine.Sink, error) {
	return nil, fmt.Errorf("emit %q is not available in this build yet", t.Kind)
}
