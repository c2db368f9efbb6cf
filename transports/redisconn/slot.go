package redisconn

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

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
func Slot(key string) int {
	return int(crc16(hashTag(key))) % SlotCount
}

func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the variant Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
