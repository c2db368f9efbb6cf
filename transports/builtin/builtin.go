// Package builtin registers flowrun's own transports with package transports when imported:
// the stream, claiming, reclaim, list, pubsub, file, pipe and schedule sources and the stream, list,
// pubsub and record emits. cli imports it, so every binary whose main calls cli.Main has them:
//
//	import _ "github.com/flowrun/flowrun/transports/builtin"
package builtin

import (
	_ "github.com/flowrun/flowrun/transports/file"
	_ "github.com/flowrun/flowrun/transports/pipe"
	_ "github.com/flowrun/flowrun/transports/redislist"
	_ "github.com/flowrun/flowrun/transports/redispubsub"
	_ "github.com/flowrun/flowrun/transports/redisstream"
	_ "github.com/flowrun/flowrun/transports/schedule"
)
