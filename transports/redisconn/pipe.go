package redisconn

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
)

// ExecPipe runs a pipeline and returns the error that failed it as a whole, or nil when the
// commands ran and carry their own results (redis.Nil and per-command errors included). go-redis
// does not stamp every whole-pipeline failure onto the commands (a connection that failed AUTH
// leaves them with no error and no value), so a caller must not read results after that.
func ExecPipe(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return nil
		}
	}
	return err
}

// CmdErrors reads cmds after ExecPipe returned nil: it returns the errors of the commands that
// failed, in order, and calls ok(i) for each command cmds[i] that succeeded.
func CmdErrors[C redis.Cmder](cmds []C, ok func(i int)) []error {
	var errs []error
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			errs = append(errs, err)
			continue
		}
		ok(i)
	}
	return errs
}

// ExecWrites runs a sink's pipeline of writes (ExecPipe) and returns nil, the whole pipeline's
// failure as "OP: err", or the first failed command's as "OP KEY: err", KEY being the command's
// first argument (its key or channel). The passwords client was built with are redacted.
func ExecWrites[C redis.Cmder](ctx context.Context, client redis.UniversalClient, pipe redis.Pipeliner, cmds []C, op string) error {
	if err := ExecPipe(ctx, pipe); err != nil {
		return RedactError(fmt.Errorf("%s: %w", op, err), SecretsOf(client)...)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return RedactError(fmt.Errorf("%s %s: %w", op, c.Args()[1], err), SecretsOf(client)...)
		}
	}
	return nil
}

// ExecFaults runs a sink's pipeline of writes and names what failed, per message, as an
// *engine.SettleError (nil when everything was written). Command j wrote the messages
// owners[j]; a nil owners means command j wrote message j. A fault carries the command's name,
// its key (first argument) and Redis's own error, passwords redacted.
func ExecFaults[C redis.Cmder](ctx context.Context, client redis.UniversalClient, pipe redis.Pipeliner, cmds []C, owners [][]int) error {
	err := ExecPipe(ctx, pipe)
	var se engine.SettleError
	secrets := SecretsOf(client)
	for j, c := range cmds {
		cerr := c.Err()
		if cerr == nil {
			cerr = err
		}
		if cerr == nil {
			continue
		}
		key := ""
		if args := c.Args(); len(args) > 1 {
			key = fmt.Sprint(args[1])
		}
		if owners == nil {
			se.Add(Fault(j, c.Name(), key, cerr, secrets...))
			continue
		}
		for _, i := range owners[j] {
			se.Add(Fault(i, c.Name(), key, cerr, secrets...))
		}
	}
	return se.Err()
}

// FirstErr returns a command's own error, or else its pipeline's (ExecPipe's).
func FirstErr(cmdErr, pipeErr error) error {
	if cmdErr != nil {
		return cmdErr
	}
	return pipeErr
}
