package keyslot

import (
	"fmt"
	"strings"
)

// The advice a load-time check gives when two keys that one command, script or MULTI touches
// together do not share a slot: names that would, checked to be right.

// Retag returns key with the hash tag tag: its own tag's content replaced, or "{tag}" put in
// front when it has none. The result always hashes like a key whose tag is tag.
func Retag(key, tag string) string {
	if _, ok := HashTag(key); ok {
		open := strings.IndexByte(key, '{')
		end := open + 1 + strings.IndexByte(key[open+1:], '}')
		return key[:open+1] + tag + key[end:]
	}
	return "{" + tag + "}" + key
}

// TagBoth suggests new names for a key without a hash tag and a second key that must share its
// slot: the key wrapped in braces, and the second key with the first's name, where it starts
// with it, replaced by the wrapped one ("jobs", "jobs:delayed" → "{jobs}", "{jobs}:delayed").
// ok is false for a key with braces of its own, whose wrapped name would not be the tag one
// reads in it; and the result is checked, so that a suggestion is never wrong.
func TagBoth(key, other string) (newKey, newOther string, ok bool) {
	if strings.ContainsAny(key, "{}") {
		return "", "", false
	}
	newKey = "{" + key + "}"
	tag, hasTag := HashTag(newKey)
	if !hasTag {
		return "", "", false
	}
	if rest, found := strings.CutPrefix(other, key); found {
		newOther = newKey + rest
	} else {
		newOther = Retag(other, tag)
	}
	t2, ok2 := HashTag(newOther)
	return newKey, newOther, ok2 && t2 == tag
}

// SuggestPair words the fix for a main key (a stream, a list key) and a dependent key (its
// delay_key, its processing list) in different slots, naming their attributes mainAttr and
// depAttr. written says whether the dependent key was written; when it was not, its default
// follows the main key.
func SuggestPair(main, dep, mainAttr, depAttr string, written bool) string {
	if tag, ok := HashTag(main); ok {
		return fmt.Sprintf("Use %s = %q, which shares the %s's hash tag {%s}.", depAttr, Retag(dep, tag), mainAttr, tag)
	}
	newMain, newDep, ok := TagBoth(main, dep)
	switch {
	case !ok:
		return "Give both names one hash tag: the same non-empty text in the first braces of each name (Redis hashes only that part)."
	case written:
		return fmt.Sprintf("Give both a hash tag: %s = %q and %s = %q.", mainAttr, newMain, depAttr, newDep)
	}
	return fmt.Sprintf("Give the %s a hash tag: %s = %q, and the default %s becomes %q.", mainAttr, mainAttr, newMain, depAttr, newDep)
}

// DelayQueueDetail explains why a durable_zset delay queue must share the slot of the key its
// copies move to (one script moves them), and suggests keys that would. kind names that key
// ("stream", "list") and keyAttr its attribute; written says delay_key was set, not defaulted.
func DelayQueueDetail(redisBlock, kind, keyAttr, key, delayKey string, written bool) string {
	which := "its default delay_key"
	if written {
		which = "delay_key"
	}
	return fmt.Sprintf("The redis block %q is a Redis Cluster, and a durable_zset delay queue must be in the slot of its %s (one script moves copies between them), but %s %q is in slot %d and %s %q in slot %d. %s",
		redisBlock, kind, keyAttr, key, Of(key), which, delayKey, Of(delayKey),
		SuggestPair(key, delayKey, keyAttr, "delay_key", written))
}
