package redisconn

import (
	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/keyslot"
)

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = keyslot.Count

// SameSlot reports whether keys a and b can be used together in one MULTI/EXEC or Lua script.
// Everything is on one node outside a cluster; in a cluster their hash slots must match.
func SameSlot(c redis.UniversalClient, a, b string) bool {
	switch c.(type) {
	case *redis.ClusterClient:
		return Slot(a) == Slot(b)
	case *redis.Ring:
		return a == b // a Ring shards by key and has no slots to compare
	}
	return true
}

// Slot is a key's Redis Cluster hash slot: CRC16 of its hash tag (the part inside the first
// {...}, when non-empty) or of the whole key, modulo 16384.
func Slot(key string) int { return keyslot.Of(key) }
