package config

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/internal/keyslot"
)

// Redis Cluster keeps keys that one command, script or MULTI touches together in one hash slot.
// A durable_zset delay queue moves copies between the stream and delay_key in one Lua script,
// and a reliable list moves elements between key and its processing list with BLMOVE: on a
// cluster block both pairs must hash to one slot, which the files alone decide (SPEC §5, §12).

// hashTag and keySlot are keyslot's, under the names this package reads best with.
var (
	hashTag = keyslot.HashTag
	keySlot = keyslot.Of
)

// retag returns key with the hash tag tag: its own tag's content replaced, or "{tag}" put in
// front when it has none. The result always hashes like a key whose tag is tag.
func retag(key, tag string) string {
	if _, ok := hashTag(key); ok {
		open := strings.IndexByte(key, '{')
		end := open + 1 + strings.IndexByte(key[open+1:], '}')
		return key[:open+1] + tag + key[end:]
	}
	return "{" + tag + "}" + key
}

// tagBoth suggests new names for a key without a hash tag and a second key that must share its
// slot: the key wrapped in braces, and the second key with the first's name, where it starts
// with it, replaced by the wrapped one ("jobs", "jobs:delayed" → "{jobs}", "{jobs}:delayed").
// ok is false for a key with braces of its own, whose wrapped name would not be the tag one
// reads in it; and the result is checked, so that a suggestion is never wrong.
func tagBoth(key, other string) (newKey, newOther string, ok bool) {
	if strings.ContainsAny(key, "{}") {
		return "", "", false
	}
	newKey = "{" + key + "}"
	tag, hasTag := hashTag(newKey)
	if !hasTag {
		return "", "", false
	}
	if rest, found := strings.CutPrefix(other, key); found {
		newOther = newKey + rest
	} else {
		newOther = retag(other, tag)
	}
	t2, ok2 := hashTag(newOther)
	return newKey, newOther, ok2 && t2 == tag
}

// checkClusterSlots reports, for a pipeline whose source reads from a cluster redis block, the
// key pairs that must share a slot and do not, at the attribute to change, with names that
// would work.
func checkClusterSlots(pl *Pipeline, redis map[string]*Redis) hcl.Diagnostics {
	src := pl.Source
	if src == nil || !src.IsRedis() {
		return nil
	}
	r := redis[src.Redis]
	if r == nil || len(r.Cluster) == 0 {
		return nil
	}
	cluster := fmt.Sprintf("The redis block %q is a Redis Cluster", r.Name)
	switch {
	case src.IsStream() && pl.DelayedRetry == DelayedRetryDurableZSet && src.Stream != "" && pl.DelayKey != "":
		stream, dk := src.Stream, pl.DelayKey
		if keySlot(stream) == keySlot(dk) {
			return nil
		}
		detail := fmt.Sprintf("%s, and a durable_zset delay queue must be in the slot of its stream (one script moves copies between them), but stream %q is in slot %d and ",
			cluster, stream, keySlot(stream))
		subject := src.streamRange
		if pl.delayKeyRange != nil {
			subject = *pl.delayKeyRange
			detail += fmt.Sprintf("delay_key %q in slot %d.", dk, keySlot(dk))
		} else {
			detail += fmt.Sprintf("its default delay_key %q in slot %d.", dk, keySlot(dk))
		}
		detail += " " + suggestPair(stream, dk, "stream", "delay_key", pl.delayKeyRange != nil)
		return hcl.Diagnostics{slotDiag(subject, detail)}

	case src.Kind == KindList && src.Reliable && src.Key != "" && src.Processing != "":
		key, p := src.Key, src.Processing
		if src.processingRange == nil {
			// The default "<key>:processing:<consumer>" shares key's tag, and without a tag it
			// shares key's slot only by chance, for some consumer names.
			if _, ok := hashTag(key); ok {
				return nil
			}
			detail := fmt.Sprintf("%s, and a reliable list's processing list must be in the slot of its key (BLMOVE moves elements between them), but key %q has no hash tag, and its default processing list %q holds the consumer name, so the two share a slot only by chance. ",
				cluster, key, p)
			detail += suggestPair(key, p, "key", "processing", false)
			return hcl.Diagnostics{slotDiag(src.keyRange, detail)}
		}
		if keySlot(key) == keySlot(p) {
			return nil
		}
		detail := fmt.Sprintf("%s, and a reliable list's processing list must be in the slot of its key (BLMOVE moves elements between them), but key %q is in slot %d and processing %q in slot %d. ",
			cluster, key, keySlot(key), p, keySlot(p))
		detail += suggestPair(key, p, "key", "processing", true)
		return hcl.Diagnostics{slotDiag(*src.processingRange, detail)}
	}
	return nil
}

// suggestPair words the fix for a main key (stream, list key) and a dependent key (delay_key,
// processing) of different slots. written says whether the dependent key was written; when it
// was not, its default follows the main key.
func suggestPair(main, dep, mainAttr, depAttr string, written bool) string {
	if tag, ok := hashTag(main); ok {
		return fmt.Sprintf("Use %s = %q, which shares the %s's hash tag {%s}.", depAttr, retag(dep, tag), mainAttr, tag)
	}
	newMain, newDep, ok := tagBoth(main, dep)
	switch {
	case !ok:
		return "Give both names one hash tag: the same non-empty text in the first braces of each name (Redis hashes only that part)."
	case written:
		return fmt.Sprintf("Give both a hash tag: %s = %q and %s = %q.", mainAttr, newMain, depAttr, newDep)
	}
	return fmt.Sprintf("Give the %s a hash tag: %s = %q, and the default %s becomes %q.", mainAttr, mainAttr, newMain, depAttr, newDep)
}

func slotDiag(subject hcl.Range, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Keys in different cluster slots",
		Detail:   detail,
		Subject:  subject.Ptr(),
	}
}
