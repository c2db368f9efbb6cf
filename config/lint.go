package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Lint (SPEC §12): configurations that are valid but almost always a mistake are reported as
// warnings, with positions; they never stop a run, and validate exits 0 with them. (A Cluster
// pair of keys that does not share a hash tag is an error, decided where the source decodes.)

// HandlerTimeout is implemented by the config of a Go handler that bounds each call (the
// built-in http and exec): validate warns when that bound exceeds the pipeline's
// shutdown_timeout, since a stop would cut such a call short.
type HandlerTimeout interface {
	HandlerTimeout() time.Duration
}

func lintPipeline(pl *Pipeline) hcl.Diagnostics {
	var diags hcl.Diagnostics
	diags = append(diags, lintRetryLoop(pl)...)
	if pl.Handler != nil && pl.Handler.Config != nil {
		if ht, ok := pl.Handler.Config.Value().(HandlerTimeout); ok {
			if t := ht.HandlerTimeout(); t > pl.ShutdownTimeout {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagWarning,
					Summary:  "Handler timeout exceeds shutdown_timeout",
					Detail: fmt.Sprintf("The %s handler may run for up to %s, but a stop gives in-flight handlers only shutdown_timeout (%s): a call still running then is cancelled and retried. Raise shutdown_timeout to at least %s, or lower the handler's timeout.",
						pl.Handler.Name, t, pl.ShutdownTimeout, t),
					Subject: pl.Handler.DeclRange.Ptr(),
				})
			}
		}
	}
	return diags
}

// lintRetryLoop warns where a rule's outcome can be the bare retry on a source whose retry
// writes a copy that is read again at once, with no max_attempts: a message that keeps failing
// then loops at full speed (on a stream, 246k copies in 22 s were seen).
func lintRetryLoop(pl *Pipeline) hcl.Diagnostics {
	if pl.MaxAttempts > 0 || len(pl.bareRetries) == 0 || pl.Source == nil || pl.Source.Config == nil {
		return nil
	}
	caps := pl.Source.Config.Capabilities()
	copies := (caps.Ack && !caps.RetryInPlace) || (!caps.Ack && pl.DeadLetter != "")
	if !copies {
		return nil
	}
	var diags hcl.Diagnostics
	for _, r := range pl.bareRetries {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "Retry without a cap loops at full speed",
			Detail: fmt.Sprintf("This outcome can be retry, and a retry on a %s source writes a copy that is read again at once; without max_attempts a message that keeps failing loops forever. Set max_attempts (with a dead_letter), or retry later with retry_after(backoff('1s', '5m')).",
				pl.Source.Kind),
			Subject: r.Ptr(),
		})
	}
	return diags
}
