package plugins

import (
	"context"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/registry"
)

// fakeEmit is an emit kind's module as transports.EmitKind answers for it.
type fakeEmit struct {
	name        string
	redis, path bool
}

func (f fakeEmit) ModuleID() registry.ID { return registry.NewID(registry.Emit, f.name) }
func (f fakeEmit) WritesRedis() bool     { return f.redis }
func (f fakeEmit) TakesPath() bool       { return f.path }

// To resolves its kind through the registry when the handler emits: a registered kind gets its
// redis block or path as the kind takes them, anything else fails the emit.
func TestToResolvesEmitKinds(t *testing.T) {
	t.Cleanup(registry.Snapshot())
	registry.Register(fakeEmit{name: "test-queue", redis: true})
	registry.Register(fakeEmit{name: "test-file", path: true})
	registry.Register(fakeEmit{name: "test-hook"})

	for _, tc := range []struct {
		to      Target
		want    engine.Target
		wantKey string
		err     string
	}{
		{to: To("test-queue", "q"), want: engine.Target{Kind: "test-queue", Redis: "main"}, wantKey: "q"},
		{to: To("test-queue", "q").Via("other"), want: engine.Target{Kind: "test-queue", Redis: "other"}, wantKey: "q"},
		{to: To("test-file", "r").InFile("out.jsonl"), want: engine.Target{Kind: "test-file", Path: "/cfg/out.jsonl"}, wantKey: "r"},
		{to: To("test-hook", "h"), want: engine.Target{Kind: "test-hook"}, wantKey: "h"},
		{to: To("nope", "k"), err: `emit: nope "k": no emit kind "nope" is registered`},
		{to: To("test-hook", ""), err: `emit: test-hook "": empty key`},
		{to: To("test-hook", "h").Via("main"), err: `Via: a test-hook emit writes through no redis block`},
		{to: To("test-queue", "q").InFile("x"), err: `InFile: a test-queue emit takes no path`},
		{to: KindTarget{}, err: "the zero KindTarget: use To"},
	} {
		h := HandlerFunc(func(_ context.Context, _ Message, emit *Emitter) (Outcome, error) {
			emit.Emit(tc.to, []byte("p"), nil)
			return Ack(), nil
		})
		a := &adapter{h: h, redis: "main", dir: "/cfg"}
		res := a.Handle(context.Background(), &engine.Delivery{Attempt: 1})
		switch {
		case tc.err != "":
			if res.Err == nil || !strings.Contains(res.Err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.to, res.Err, tc.err)
			}
		case res.Err != nil || len(res.Emits) != 1:
			t.Errorf("%s: err %v, emits %v", tc.to, res.Err, res.Emits)
		case res.Emits[0].Target != tc.want || res.Emits[0].Message.Key != tc.wantKey:
			t.Errorf("%s: target %+v key %q, want %+v %q", tc.to, res.Emits[0].Target, res.Emits[0].Message.Key, tc.want, tc.wantKey)
		}
	}
}
