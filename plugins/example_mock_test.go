package plugins_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/flowrun/flowrun/cli"
	"github.com/flowrun/flowrun/plugins"
)

// StampConfig is the body of `handler "stamp" {}`: the stamping service to ask.
type StampConfig struct {
	URL string `hcl:"url"`
}

// StampMock is a test's `mock {}` for the stamp handler: the stamp the service would answer, or
// that it is down. It decodes as a handler config does, by its hcl tags.
type StampMock struct {
	Stamp string `hcl:"stamp,optional"`
	Down  bool   `hcl:"down,optional"`
}

// String says what the mock answers, in `flowrun test`'s output.
func (m StampMock) String() string {
	if m.Down {
		return "down"
	}
	return "stamp " + m.Stamp
}

// registerStamp registers the handler on first use rather than in init, as a real handler does,
// so that this package's other tests see only the built-in mockable handlers.
var registerStamp = sync.OnceFunc(func() {
	plugins.Register(plugins.Spec[StampConfig]{
		Name: "stamp",
		Doc:  "stamps each message with a stamp from a stamping service",
		Mock: plugins.MockSpec[StampMock]{},
		Provision: func(_ context.Context, c StampConfig, env plugins.Env) (plugins.Handler, error) {
			ask := func(ctx context.Context, payload []byte) (string, error) { // the real service
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, strings.NewReader(string(payload)))
				if err != nil {
					return "", err
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return string(b), err
			}
			if m, ok := env.Mock.(StampMock); ok { // `flowrun test`, with the test's mock block
				ask = func(context.Context, []byte) (string, error) {
					if m.Down {
						return "", errors.New("stamp service down")
					}
					return m.Stamp, nil
				}
			}
			return plugins.HandlerFunc(func(ctx context.Context, msg plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
				stamp, err := ask(ctx, msg.Payload())
				if err != nil {
					return plugins.RetryAfter(time.Minute), nil
				}
				emit.Emit(plugins.ToRecord("stamped"), []byte(stamp+" "+string(msg.Payload())), nil)
				return plugins.Ack(), nil
			}), nil
		},
	})
})

// A handler that calls out declares its own mock block, and `flowrun test` runs its real logic
// on what the mock answers, without any connection.
func Example_mock() {
	registerStamp()
	dir, err := os.MkdirTemp("", "stamp")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "stamp.hcl")
	err = os.WriteFile(path, []byte(`
pipeline "stamp" {
  source "pipe" {}
  out_retry = "again"
  handler "stamp" { url = "https://stamps.example/v1" }
}

test "stamped" {
  pipeline = "stamp"
  message { payload = "invoice 7" }
  mock { stamp = "S-1" }
  expect {
    outcome = "ack"
    emits   = [{ kind = "record", key = "stamped", payload = "S-1 invoice 7" }]
  }
}

test "service down" {
  pipeline = "stamp"
  message { payload = "invoice 7" }
  mock { down = true }
  expect { outcome = "retry_after('1m')" }
}
`), 0o644)
	if err != nil {
		panic(err)
	}
	code := cli.Run(context.Background(), []string{"test", path}, cli.Stdio{In: strings.NewReader(""), Out: os.Stdout, Err: os.Stdout})
	fmt.Println("exit", code)
	// Output:
	// PASS stamped
	// PASS service down
	// 2 passed, 0 failed
	// exit 0
}
