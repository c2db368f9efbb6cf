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
package payouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/plugins"
)

// Defaults of the handler's attributes.
const (
	DefaultBase = "1s"
	DefaultMax  = "1m"
)

func init() {
	plugins.Register(plugins.Plugin{
		Name:   "payout",
		Doc:    "pays out {id, amount} payouts; dead-letters invalid ones, retries a flaky gateway with backoff",
		Config: func() any { return &Config{Base: DefaultBase, Max: DefaultMax} },
		New: func(_ context.Context, cfg any, env plugins.Env) (engine.Handler, error) {
			c, ok := cfg.(*Config)
			if !ok || c.base <= 0 {
				return nil, fmt.Errorf("payout: config %T was not decoded and validated", cfg)
			}
			return &Handler{cfg: c, log: env.Logger}, nil
		},
	})
}

// Config is the body of `handler "payout" {}`.
type Config struct {
	Base         string `hcl:"base,optional"`
	Max          string `hcl:"max,optional"`
	Latency      string `hcl:"latency,optional"`
	FailAttempts int    `hcl:"fail_attempts,optional"`
	DoneKey      string `hcl:"done_key,optional"`

	base, max, latency time.Duration
}

// ValidateBlock parses the durations and checks the values, each diagnostic at its attribute.
func (c *Config) ValidateBlock(b plugins.Block) hcl.Diagnostics {
	var diags hcl.Diagnostics
	var d *hcl.Diagnostic
	if c.base, d = b.Duration("base", c.Base); d != nil {
		diags = append(diags, d)
	}
	if c.max, d = b.Duration("max", c.Max); d != nil {
		diags = append(diags, d)
	}
	if c.base > 0 && c.max > 0 && c.base > c.max {
		diags = append(diags, b.Error("base", "Invalid value",
			fmt.Sprintf(`"base" (%s) must not exceed "max" (%s).`, c.base, c.max)))
	}
	if c.Latency != "" {
		if c.latency, d = b.Duration("latency", c.Latency); d != nil {
			diags = append(diags, d)
		}
	}
	if c.FailAttempts < 0 {
		diags = append(diags, b.Error("fail_attempts", "Invalid value", `"fail_attempts" must not be negative.`))
	}
	return diags
}

// Handler is the built "payout" handler. It keeps no state per message, so it is safe for the
// concurrent calls the engine makes.
type Handler struct {
	cfg *Config
	log zerolog.Logger
}

var (
	_ engine.Handler         = (*Handler)(nil)
	_ plugins.Starter        = (*Handler)(nil)
	_ plugins.Closer         = (*Handler)(nil)
	_ plugins.BlockValidator = (*Config)(nil)
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

func (h *Handler) Handle(ctx context.Context, d *engine.Delivery) engine.Result {
	var p payout
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return engine.Result{Outcome: engine.DeadLetter("payout: payload is not a JSON object: " + err.Error())}
	}
	switch {
	case p.ID == nil || p.ID == "":
		return engine.Result{Outcome: engine.DeadLetter("payout: missing id")}
	case p.Amount == nil:
		return engine.Result{Outcome: engine.DeadLetter(fmt.Sprintf("payout %v: missing amount", p.ID))}
	case *p.Amount <= 0:
		return engine.Result{Outcome: engine.DeadLetter(fmt.Sprintf("payout %v: amount must be positive, got %s",
			p.ID, strconv.FormatFloat(*p.Amount, 'f', -1, 64)))}
	}

	if err := h.callGateway(ctx, d); ctx.Err() != nil {
		// The stop's grace period ran out mid-call: an error, so it is logged; a retry.
		return engine.Result{Outcome: engine.Retry(), Err: err}
	} else if err != nil {
		// The gateway may be back soon: wait longer after each failed attempt, never in step
		// with the other workers (full jitter).
		delay := plugins.Backoff(h.cfg.base, h.cfg.max, d.Attempt)
		h.log.Debug().Err(err).Int("attempt", d.Attempt).Dur("delay", delay).Msg("gateway unavailable")
		return engine.Result{Outcome: engine.RetryAfter(delay)}
	}

	res := engine.Result{Outcome: engine.Ack()}
	if h.cfg.DoneKey != "" {
		done, err := json.Marshal(map[string]any{"id": p.ID, "paid": true})
		if err != nil {
			return engine.Result{Outcome: engine.Retry(), Err: fmt.Errorf("payout: %w", err)}
		}
		res.Emits = []engine.Emit{{
			Target:  engine.Target{Kind: "record"},
			Message: &engine.Message{Key: h.cfg.DoneKey, Headers: map[string]string{"payout-id": fmt.Sprint(p.ID)}, Payload: done},
		}}
	}
	return res
}

// errGatewayDown is what the simulated gateway answers when it is down.
var errGatewayDown = errors.New("payout: gateway down")

// callGateway simulates the payment gateway: it takes latency, fails each payout's first
// fail_attempts attempts, and is down for messages with the header gateway = "down".
func (h *Handler) callGateway(ctx context.Context, d *engine.Delivery) error {
	if h.cfg.latency > 0 {
		t := time.NewTimer(h.cfg.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("payout: gateway call: %w", ctx.Err())
		}
	}
	if d.Headers["gateway"] == "down" || d.Attempt <= h.cfg.FailAttempts {
		return errGatewayDown
	}
	return nil
}
