package cli_test

// A source kind whose Config implements the registry's lifecycle interfaces: `flowrun run`
// provisions it before building the source and cleans it up once the pipeline has stopped.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/cli"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/registry"
	"github.com/flowrun/flowrun/transports"
)

var lifecycleCalls struct {
	sync.Mutex
	calls []string
}

func lifecycleCall(s string) {
	lifecycleCalls.Lock()
	defer lifecycleCalls.Unlock()
	lifecycleCalls.calls = append(lifecycleCalls.calls, s)
}

type lifecycleConfig struct {
	fail        bool
	provisioned bool
}

var (
	_ registry.Provisioner  = (*lifecycleConfig)(nil)
	_ registry.CleanerUpper = (*lifecycleConfig)(nil)
)

func (c *lifecycleConfig) Decode(b *transports.Block)        { b.Attrs().Bool("fail", &c.fail) }
func (c *lifecycleConfig) NaturalKey() string                { return "" }
func (c *lifecycleConfig) Capabilities() engine.Capabilities { return engine.Capabilities{} }
func (c *lifecycleConfig) Provision(ctx context.Context) error {
	lifecycleCall("provision")
	if c.fail {
		return errors.New("the lifecycle source refuses")
	}
	c.provisioned = true
	return nil
}

func (c *lifecycleConfig) Cleanup() error {
	lifecycleCall("cleanup")
	return nil
}

func (c *lifecycleConfig) Build(context.Context, *transports.Env) (engine.Source, error) {
	lifecycleCall("build")
	if !c.provisioned {
		return nil, errors.New("built before Provision")
	}
	return &sequence{c: sequenceConfig{Key: "k", Count: 1}}, nil
}

func TestSourceLifecycle(t *testing.T) {
	t.Cleanup(registry.Snapshot()) // other tests list the source kinds
	transports.Register(transports.Kind{
		Name:   "lifecycle",
		Schema: hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "fail"}}},
		New:    func() transports.Config { return &lifecycleConfig{} },
	})
	for _, tc := range []struct {
		fail      string
		code      int
		want, err string
	}{
		{"false", cli.ExitOK, "provision build cleanup", ""},
		{"true", cli.ExitRuntime, "provision cleanup", "the lifecycle source refuses"},
	} {
		lifecycleCalls.Lock()
		lifecycleCalls.calls = nil
		lifecycleCalls.Unlock()
		path := writeHCL(t, `
pipeline "p" {
  source "lifecycle" {
    fail = `+tc.fail+`
  }
  rule "all" { outcome = "ack" }
}
`)
		code, _, errs := runCLI(t, "run", "--log-level", "error", path)
		lifecycleCalls.Lock()
		got := strings.Join(lifecycleCalls.calls, " ")
		lifecycleCalls.Unlock()
		if code != tc.code || got != tc.want || !strings.Contains(errs, tc.err) {
			t.Errorf("fail = %s: exit %d, calls %q, stderr %q; want exit %d, calls %q, stderr with %q", tc.fail, code, got, errs, tc.code, tc.want, tc.err)
		}
	}
}
