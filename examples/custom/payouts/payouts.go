// Package payouts is an example Go handler for flowrun: "payout" pays out one payout per message.
// A payout that can never succeed goes to the dead letter at once, saying why; a gateway that
// is down is tried again later, with exponential backoff and full jitter.
//
//	handler "payout" {
//	  base          = "1s"            # first backoff cap (default 1s)
//	  max           = "1m"            # largest backoff cap (default 1m)
//	  latency       = "50ms"          # optional: how long a gateway call takes
//	  fail_attempts = 1               # optional: the gateway fails each payout's first N attempts
//	  done_key      = "payouts.done"  # optional: emit a record per paid payout under this key
//	}
//
// The payload is a JSON object with an id and a positive amount. A message with the header
// gateway = "down" finds the gateway down.
//
// It imports flowrun's handler API, package plugins, and nothing else of flowrun's.
package payouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/plugins"
)

// Defaults of the handler's attributes.
const (
	DefaultBase = time.Second
	DefaultMax  = time.Minute
)

func init() {
	plugins.Register(plugins.Spec[Config]{
		Name:      "payout",
		Doc:       "pays out {id, amount} payouts; dead-letters invalid ones, retries a flaky gateway with backoff",
		Defaults:  func() Config { return Config{Base: DefaultBase, Max: DefaultMax} },
		Validate:  Validate,
		Provision: New,
	})
}

// Config is the body of `handler "payout" {}`. Durations are written as strings ("250ms",
// "30s", "1h") and arrive parsed.
type Config struct {
	Base         time.Duration `hcl:"base,optional"`
	Max          time.Duration `hcl:"max,optional"`
	Latency      time.Duration `hcl:"latency,optional"`
	FailAttempts int           `hcl:"fail_attempts,optional"`
	DoneKey      string        `hcl:"done_key,optional"`
}

// Validate checks what the types cannot, each error at its attribute. It runs at every load,
// `flowrun validate` included.
func Validate(c Config, b plugins.Block) error {
	var errs []error
	if c.Base <= 0 {
		errs = append(errs, b.Errorf("base", "Invalid value", `"base" must be greater than zero.`))
	}
	if c.Max <= 0 {
		errs = append(errs, b.Errorf("max", "Invalid value", `"max" must be greater than zero.`))
	}
	if c.Base > 0 && c.Max > 0 && c.Base > c.Max {
		errs = append(errs, b.Errorf("base", "Invalid value", `"base" (%s) must not exceed "max" (%s).`, c.Base, c.Max))
	}
	if c.FailAttempts < 0 {
		errs = append(errs, b.Errorf("fail_attempts", "Invalid value", `"fail_attempts" must not be negative.`))
	}
	return errors.Join(errs...)
}

// New builds the handler from a validated config: once per pipeline by `flowrun run`, once per
// test by `flowrun test`.
func New(_ context.Context, c Config, env plugins.Env) (plugins.Handler, error) {
	return &Handler{cfg: c, log: env.Logger}, nil
}

// Handler is the built "payout" handler. It keeps no state per message, so it is safe for the
// concurrent calls the engine makes.
type Handler struct {
	cfg Config
	log zerolog.Logger
}

var (
	_ plugins.Handler = (*Handler)(nil)
	_ plugins.Starter = (*Handler)(nil)
	_ plugins.Closer  = (*Handler)(nil)
)

// payout is the payload. Pointers tell a missing field from a zero one.
type payout struct {
	ID     any      `json:"id"`
	Amount *float64 `json:"amount"`
}

// Start is where a real handler would dial its gateway; an error stops the run before any
// message is read.
func (h *Handler) Start(context.Context) error {
	h.log.Info().Msg("payout gateway ready")
	return nil
}

// Close is where a real handler would hang up.
func (h *Handler) Close() error {
	h.log.Info().Msg("payout gateway closed")
	return nil
}

// Handle pays out one payout.
func (h *Handler) Handle(ctx context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
	var p payout
	if err := json.Unmarshal(m.Payload(), &p); err != nil {
		return plugins.DeadLetter("payout: payload is not a JSON object: " + err.Error()), nil
	}
	switch {
	case p.ID == nil || p.ID == "":
		return plugins.DeadLetter("payout: missing id"), nil
	case p.Amount == nil:
		return plugins.DeadLetter(fmt.Sprintf("payout %v: missing amount", p.ID)), nil
	case *p.Amount <= 0:
		return plugins.DeadLetter(fmt.Sprintf("payout %v: amount must be positive, got %s",
			p.ID, strconv.FormatFloat(*p.Amount, 'f', -1, 64))), nil
	}

	if err := h.callGateway(ctx, m); ctx.Err() != nil {
		// The stop's grace period ran out mid-call: an error, so it is logged; a retry.
		return plugins.Retry(), err
	} else if err != nil {
		// The gateway may be back soon: wait longer after each failed attempt, never in step
		// with the other workers (full jitter).
		delay := plugins.Backoff(h.cfg.Base, h.cfg.Max, m.Attempt())
		h.log.Debug().Err(err).Int("attempt", m.Attempt()).Dur("delay_ms", delay).Msg("gateway unavailable")
		return plugins.RetryAfter(delay), nil
	}

	if h.cfg.DoneKey != "" {
		done, err := json.Marshal(map[string]any{"id": p.ID, "paid": true})
		if err != nil {
			return plugins.Retry(), fmt.Errorf("payout: %w", err)
		}
		emit.Emit(plugins.ToRecord(h.cfg.DoneKey), done, map[string]string{"payout-id": fmt.Sprint(p.ID)})
	}
	return plugins.Ack(), nil
}

// errGatewayDown is what the simulated gateway answers when it is down.
var errGatewayDown = errors.New("payout: gateway down")

// callGateway simulates the payment gateway: it takes latency, fails each payout's first
// fail_attempts attempts, and is down for messages with the header gateway = "down".
func (h *Handler) callGateway(ctx context.Context, m plugins.Message) error {
	if h.cfg.Latency > 0 {
		t := time.NewTimer(h.cfg.Latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("payout: gateway call: %w", ctx.Err())
		}
	}
	if m.Header("gateway") == "down" || m.Attempt() <= h.cfg.FailAttempts {
		return errGatewayDown
	}
	return nil
}
