package config

import "testing"

// A step is pure (its source may skip a run's load, Step.Pure) only when nothing of a visit but
// its transition reaches the world: rules alone, no emit, no flow block, no timeout.
func TestStepPure(t *testing.T) {
	path := writeTemp(t, `redis "main" {
  url = "redis://127.0.0.1:6379/0"
}

workflow "w" {
  start {
    source "stream" {
      stream = "in"
    }
  }
  step "choose" {
    rule "big" {
      when = "input.n > 10"
      next = "emits"
    }
    rule "small" {
      output = "input.n"
    }
    next = "handler"
  }
  step "handler" {
    handler "exec" {
      command = ["true"]
    }
    next = "emits"
  }
  step "emits" {
    rule "r" {
      emit "stream" {
        key = "out"
      }
    }
    next = "timed"
  }
  step "timed" {
    timeout    = "1m"
    on_timeout = "keyed"
    rule "r" {
      output = "1"
    }
    next = "keyed"
  }
  step "keyed" {
    concurrency_key {
      key   = "string(input.n)"
      limit = 1
    }
    rule "r" {
      output = "1"
    }
  }
}
`)
	w := mustLoad(t, path).Workflow("w")
	for name, want := range map[string]bool{"choose": true, "handler": false, "emits": false, "timed": false, "keyed": false} {
		if got := w.Step(name).Pure(); got != want {
			t.Errorf("step %s: Pure() = %v, want %v", name, got, want)
		}
	}
}
