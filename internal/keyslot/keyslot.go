// Package keyslot computes Redis Cluster hash slots, so that config (from the files alone) and
// the transports (at run time) agree on which keys may share a script.
package keyslot

import "strings"

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// HashTag returns the content of key's hash tag: what lies between the first '{' and the first
// '}' after it, when that is not empty. Only that part is hashed when it exists.
func HashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 { // no '}', or "{}": the whole key is hashed
		return "", false
	}
	return key[open+1 : open+1+end], true
}

// Of returns key's hash slot, as Redis Cluster computes it: CRC-16/XMODEM of the hash tag, or of
// the whole key without one, modulo 16384.
func Of(key string) int {
	if tag, ok := HashTag(key); ok {
		key = tag
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Count
}
