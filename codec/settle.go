package codec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/flowrun/flowrun/engine"
)

// RecordCopy is the copy and dead-letter switch of the record transports (a stream file, a
// pipe; SPEC §4, §5): the record that st writes. ActAck writes nothing (nil); ActRequeue writes
// the copy under retryKey (the copy's own key when retryKey is ""); ActDeadLetter writes it
// under the dead-letter key. The record is a new message: the settlement's copy is never
// changed. Any other action is engine.ErrUnsupported; a missing copy or dead-letter key is
// engine.ErrPermanent.
func RecordCopy(st engine.Settlement, retryKey string) (*engine.Message, error) {
	var key string
	switch st.Action {
	case engine.ActAck:
		return nil, nil
	case engine.ActRequeue:
		key = retryKey
	case engine.ActDeadLetter:
		if st.DeadLetterKey == "" {
			return nil, fmt.Errorf("dead letter without a key: %w", engine.ErrPermanent)
		}
		key = st.DeadLetterKey
	default:
		return nil, fmt.Errorf("%s: %w", st.Action, engine.ErrUnsupported)
	}
	if st.Copy == nil {
		return nil, fmt.Errorf("%s without a copy: %w", st.Action, engine.ErrPermanent)
	}
	c := *st.Copy
	if key != "" {
		c.Key = key
	}
	return &c, nil
}

// ClassifyWrite says why writing records (an append to a stream file, a write to stdout) failed,
// as a short metric label, and whether the failure passes by itself (SPEC §10 "Settlement
// failures"). Permanent: an unsupported action or an invalid settlement; an output that has gone
// (EPIPE: the reader left; a closed file), that may not be written (a permission error, a
// read-only filesystem) or that is missing (a path or folder that is gone). Transient: a full
// disk (ENOSPC, EDQUOT), an I/O error, and anything else.
func ClassifyWrite(err error) (reason string, permanent bool) {
	switch {
	case errors.Is(err, engine.ErrUnsupported):
		return "unsupported", true
	case errors.Is(err, engine.ErrPermanent):
		return "invalid", true
	case errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed):
		return "closed", true
	case errors.Is(err, fs.ErrPermission):
		return "permission", true
	case errors.Is(err, syscall.EROFS):
		return "read_only", true
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return "not_found", true
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "no_space", false
	case errors.Is(err, syscall.EIO):
		return "io", false
	}
	return "error", false
}

// WriteFault is delivery i's failed settlement on a record transport, classified by
// ClassifyWrite.
func WriteFault(i int, command, key string, err error) engine.Fault {
	reason, permanent := ClassifyWrite(err)
	return engine.Fault{Index: i, Command: command, Key: key, Reason: reason, Permanent: permanent, Err: err}
}
