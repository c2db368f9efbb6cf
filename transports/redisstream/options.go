package redisstream

import (
	"errors"
	"fmt"
	"time"
)

// Source kinds (SPEC §2).
const (
	KindStream   = "stream"
	KindClaiming = "claiming"
	KindReclaim  = "reclaim"
)

// Delay modes (SPEC §5, delayed_retry).
const (
	DelayRuntime     = "runtime"
	DelayDurableZSet = "durable_zset"
)

// Defaults (SPEC §2).
const (
	DefaultStart = "0"
	DefaultBatch = 100
	DefaultBlock = time.Second
	// MoveBatch is how many due delayed copies one read moves back onto the stream (SPEC §5).
	MoveBatch = 128
	// DelayKeySuffix makes the default delay_key "<stream>:delayed".
	DelayKeySuffix = ":delayed"
)

// Options configures one stream source.
type Options struct {
	Kind     string // KindStream, KindClaiming or KindReclaim
	Stream   string
	Group    string
	Consumer string
	Start    string        // where a missing group starts: "0" (default) or "$"
	MinIdle  time.Duration // claiming and reclaim only, and required there
	Batch    int           // entries asked for per read (default 100)
	Block    time.Duration // how long a read blocks (default 1s)
	// DelayedRetry is "runtime" (default: the engine holds copies) or "durable_zset"
	// (ActDelay stores copies in DelayKey). The stream kind only.
	DelayedRetry string
	DelayKey     string // durable_zset's sorted set; default "<stream>:delayed"
	// Trim is "acked" to trim, every HygieneEvery, what every group of the stream has read and
	// acknowledged (SPEC §11); "" leaves the stream alone.
	Trim string
	// ConsumerTTL deletes consumers of the group idle that long that own no pending entries;
	// 0: never.
	ConsumerTTL time.Duration
}

// TrimAcked is the one value of trim.
const TrimAcked = "acked"

// HygieneEvery is how often trim and consumer_ttl run.
const HygieneEvery = 10 * time.Second

func (o *Options) setDefaults() {
	if o.Start == "" {
		o.Start = DefaultStart
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Block == 0 {
		o.Block = DefaultBlock
	}
	if o.DelayedRetry == "" {
		o.DelayedRetry = DelayRuntime
	}
	if o.DelayedRetry == DelayDurableZSet && o.DelayKey == "" {
		o.DelayKey = o.Stream + DelayKeySuffix
	}
}

// Validate checks o after defaults are applied. The config package reports these mistakes with
// positions first; this is the transport's own guard.
func (o *Options) Validate() error {
	var errs []error
	switch o.Kind {
	case KindStream, KindClaiming, KindReclaim:
	default:
		errs = append(errs, fmt.Errorf("unknown kind %q", o.Kind))
	}
	for _, f := range []struct{ name, v string }{{"stream", o.Stream}, {"group", o.Group}, {"consumer", o.Consumer}} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	if o.Kind == KindClaiming || o.Kind == KindReclaim {
		if o.MinIdle < time.Millisecond {
			errs = append(errs, fmt.Errorf("min_idle is required for %s (at least 1ms)", o.Kind))
		}
	}
	if o.Batch < 1 {
		errs = append(errs, fmt.Errorf("batch must be at least 1, got %d", o.Batch))
	}
	if o.Block < time.Millisecond {
		errs = append(errs, fmt.Errorf("block must be at least 1ms, got %s", o.Block))
	}
	switch o.DelayedRetry {
	case DelayRuntime:
	case DelayDurableZSet:
		if err := durableKind(o.Kind); err != nil {
			errs = append(errs, err)
		}
		if o.DelayKey == o.Stream {
			errs = append(errs, errors.New("delay_key must differ from stream"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown delayed_retry %q", o.DelayedRetry))
	}
	return errors.Join(errs...)
}

// durableKind says why kind takes no durable_zset: only the stream kind copies a retry_after;
// claiming and reclaim keep the entry pending until it is due, which a crash already survives.
// Decode reports it at the attribute, Validate again for a Config built without HCL.
func durableKind(kind string) error {
	if kind == KindStream {
		return nil
	}
	return fmt.Errorf(`delayed_retry = "durable_zset" applies to the stream kind only: a %s source's retry_after leaves the entry pending until it is due, which a crash already survives`, kind)
}
