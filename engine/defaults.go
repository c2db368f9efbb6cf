package engine

import (
	"runtime"
	"time"
)

// The defaults of a pipeline's tuning attributes (SPEC §2, §5), declared once: the engine
// applies them to a Pipeline that leaves a field zero, and config's schema declares the
// pipeline attributes with them, so the reference shows the value the engine uses.
const (
	// DefaultShutdownTimeout is the grace for in-flight work when a pipeline does not set one.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultMaxHeld bounds the runtime delayed copies held at once when a pipeline sets no
	// max_held.
	DefaultMaxHeld = 10000
)

// DefaultConcurrency is the handlers run at once when a pipeline does not set concurrency: the
// number of CPUs.
func DefaultConcurrency() int { return runtime.NumCPU() }
