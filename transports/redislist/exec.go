package redislist

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// execPipe runs a pipeline and returns the error that failed it as a whole, or nil when the
// commands ran and carry their own results (redis.Nil and per-command errors included). go-redis
// does not stamp every whole-pipeline failure onto the commands (a connection that failed AUTH
// leaves them with no error and no value), so a caller must not read results after that.
func execPipe(ctx context.Context, pipe redis.Pipeliner) error {
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
