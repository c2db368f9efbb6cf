package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerCPU is redis-server's CPU time so far (INFO cpu: used_cpu_sys + used_cpu_user), what a
// benchmark divides by its messages to say what each cost the server.
func ServerCPU(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("info cpu: %w", err)
	}
	var total float64
	seen := 0
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k != "used_cpu_sys" && k != "used_cpu_user" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("info cpu: %s: %w", k, err)
		}
		total += f
		seen++
	}
	if seen != 2 {
		return 0, fmt.Errorf("info cpu: used_cpu_sys and used_cpu_user not both there")
	}
	return time.Duration(total * float64(time.Second)), nil
}
