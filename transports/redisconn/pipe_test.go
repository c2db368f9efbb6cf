package redisconn

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// pipeClients returns a client with the server's password and one with a wrong one, whose
// pipelines fail as a whole (AUTH) without an error on their commands.
func pipeClients(t *testing.T) (good, bad redis.UniversalClient) {
	t.Helper()
	srv := redistest.Start(t, "--requirepass", "right-pw")
	var err error
	if good, err = New(Options{URL: srv.URL, Password: "right-pw"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { good.Close() })
	if bad, err = New(Options{URL: srv.URL, Password: "wrong-pw"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bad.Close() })
	if err := good.Set(context.Background(), "pipe:str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return good, bad
}

// lpushAll queues an LPUSH of v onto each of keys in a new pipeline of c.
func lpushAll(c redis.UniversalClient, keys []string, v string) (redis.Pipeliner, []*redis.IntCmd) {
	pipe := c.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.LPush(context.Background(), k, v)
	}
	return pipe, cmds
}

func TestExecPipeAndCmdErrors(t *testing.T) {
	good, bad := pipeClients(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		client  redis.UniversalClient
		keys    []string // LPUSH x onto each; "pipe:str" holds a string (WRONGTYPE)
		pipeErr bool
		ok      []int
		failed  int
	}{
		{"all succeed", good, []string{"pipe:a", "pipe:b"}, false, []int{0, 1}, 0},
		{"one command fails", good, []string{"pipe:c", "pipe:str", "pipe:d"}, false, []int{0, 2}, 1},
		{"every command fails", good, []string{"pipe:str", "pipe:str"}, false, nil, 2},
		{"whole pipeline fails", bad, []string{"pipe:e"}, true, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pipe, cmds := lpushAll(tt.client, tt.keys, "x")
			err := ExecPipe(ctx, pipe)
			if tt.pipeErr {
				if err == nil || !IsAuthError(err) {
					t.Fatalf("ExecPipe = %v, want an auth error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ExecPipe = %v, want nil", err)
			}
			var ok []int
			errs := CmdErrors(cmds, func(i int) { ok = append(ok, i) })
			if !slices.Equal(ok, tt.ok) || len(errs) != tt.failed {
				t.Fatalf("CmdErrors: ok %v, %d errors (%v); want ok %v, %d errors", ok, len(errs), errs, tt.ok, tt.failed)
			}
			for _, e := range errs {
				if !strings.HasPrefix(e.Error(), "WRONGTYPE") {
					t.Errorf("error %q, want WRONGTYPE", e)
				}
			}
		})
	}
}

func TestExecPipeNilIsAResult(t *testing.T) {
	good, _ := pipeClients(t)
	ctx := context.Background()
	pipe := good.Pipeline()
	get := pipe.Get(ctx, "pipe:missing")
	if err := ExecPipe(ctx, pipe); err != nil {
		t.Fatalf("ExecPipe = %v, want nil", err)
	}
	if get.Err() != redis.Nil {
		t.Fatalf("GET err = %v, want redis.Nil", get.Err())
	}
}

func TestExecWrites(t *testing.T) {
	good, bad := pipeClients(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		client redis.UniversalClient
		keys   []string
		want   string // the error text starts with it; "" for nil
	}{
		{"all written", good, []string{"w:a", "w:b"}, ""},
		{"first failed command named", good, []string{"w:c", "pipe:str", "pipe:str"}, "op: x pipe:str: WRONGTYPE"},
		{"whole pipeline", bad, []string{"w:d"}, "op: x: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pipe, cmds := lpushAll(tt.client, tt.keys, "v")
			err := ExecWrites(ctx, tt.client, pipe, cmds, "op: x")
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ExecWrites = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("ExecWrites = %v, want an error starting %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "wrong-pw") {
				t.Fatalf("password in error: %v", err)
			}
		})
	}
	if n := good.LLen(ctx, "w:c").Val(); n != 1 {
		t.Fatalf("w:c has %d elements, want 1 (written before the failed command)", n)
	}
}
