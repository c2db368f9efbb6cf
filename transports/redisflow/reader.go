package redisflow

import (
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports"
)

// Reader is embedded in the Config of every source kind that reads from a redis block: it says
// so (transports.RedisBlockReader), keeps a pipeline's flow-control state in that Redis, shared
// by every process that runs the pipeline (transports.FlowStoreProvider), and names the messaging
// system "redis" in traces (transports.TraceCarrier). It holds nothing.
type Reader struct{}

var (
	_ transports.RedisBlockReader  = Reader{}
	_ transports.FlowStoreProvider = Reader{}
	_ transports.TraceCarrier      = Reader{}
)

// ReadsRedisBlock is true: the source's block takes "redis".
func (Reader) ReadsRedisBlock() bool { return true }

// FlowStore is the pipeline's store on the client of the source's redis block.
func (Reader) FlowStore(env *transports.Env, pipeline string) (engine.FlowStore, error) {
	c, err := env.Client()
	if err != nil {
		return nil, err
	}
	return New(c, pipeline), nil
}

// TraceSystem is "redis".
func (Reader) TraceSystem() string { return "redis" }
