package redislist

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// Defaults for a list source (SPEC §2).
const (
	DefaultBatch = 100
	DefaultBlock = time.Second
)

// Options configure a list source. The zero value of Reliable is a simple list; the config layer
// applies SPEC's default (reliable = true) before it gets here.
type Options struct {
	Key      string // the list read from
	Reliable bool   // true: BLMOVE into a processing list and LREM on settle; false: BRPOP
	// Consumer names this worker (default: the host name). It must be unique among the processes
	// reading one list: a start returns everything in this consumer's processing list to Key.
	Consumer string
	// Processing is the reliable list's processing list (default "<Key>:processing:<Consumer>").
	Processing string
	Batch      int // elements moved out of Key per read (default 100)
	// Block is how long a read blocks (default 1s): under a second as given, else in whole
	// seconds (go-redis's blocking commands drop the fraction).
	Block time.Duration
	// DelayedRetry is "runtime" (default: the engine holds retry_after copies) or
	// "durable_zset" (a reliable list only: ActDelay stores copies in DelayKey).
	DelayedRetry string
	DelayKey     string // durable_zset's sorted set; default "<Key>:delayed"
}

// Delay modes (SPEC §5, delayed_retry), spelled as the stream kind spells them.
const (
	DelayRuntime     = "runtime"
	DelayDurableZSet = "durable_zset"
	// DelayKeySuffix makes the default delay_key "<key>:delayed", as for streams.
	DelayKeySuffix = ":delayed"
	// MoveBatch is how many due delayed copies one read moves back onto the list.
	MoveBatch = 128
)

func (o Options) capabilities() engine.Capabilities {
	return engine.Capabilities{Ack: o.Reliable, DurableDelay: o.Reliable && o.durable(), Batch: o.Batch}
}

// durable reports whether retry_after copies are stored in the delay queue.
func (o *Options) durable() bool { return o.DelayedRetry == DelayDurableZSet }

// setDefaults fills what was left unset.
func (o *Options) setDefaults() {
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	// A zero block would block forever and make a stop wait for the next element.
	if o.Block <= 0 {
		o.Block = DefaultBlock
	}
	if o.Reliable && o.Processing == "" {
		if o.Consumer == "" {
			o.Consumer, _ = os.Hostname()
		}
		o.Processing = fmt.Sprintf("%s:processing:%s", o.Key, o.Consumer)
	}
	if o.DelayedRetry == "" {
		o.DelayedRetry = DelayRuntime
	}
	if o.durable() && o.DelayKey == "" {
		o.DelayKey = o.Key + DelayKeySuffix
	}
}

// Validate reports options no list source can run with.
func (o *Options) Validate() error {
	if o.Key == "" {
		return errors.New("redislist: key is required")
	}
	if o.Reliable && o.Processing == o.Key {
		return fmt.Errorf("redislist: processing list %q is the source list itself", o.Processing)
	}
	switch o.DelayedRetry {
	case "", DelayRuntime:
	case DelayDurableZSet:
		if !o.Reliable {
			return errors.New("redislist: delayed_retry \"durable_zset\" needs a reliable list")
		}
		if o.DelayKey == o.Key || o.DelayKey == o.Processing {
			return fmt.Errorf("redislist: delay_key %q must differ from the list and its processing list", o.DelayKey)
		}
	default:
		return fmt.Errorf("redislist: unknown delayed_retry %q", o.DelayedRetry)
	}
	return nil
}
