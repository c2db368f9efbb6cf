package resp

import (
	"fmt"
	"time"
)

// The stream replies are read in steps, so that the caller builds its own values as the bytes
// come: a reply's head says how many entries follow; each entry is read with Entry, then its
// field-value pairs with Bulk (or BulkCopy), two reads a pair.

// StreamReply reads the head of an XREADGROUP reply for one stream, a null array (nothing new)
// or [[stream, [entry …]]], and returns how many entries follow; more than most is an error, and
// nothing is allocated for it.
func (r *Reader) StreamReply(most int) (int, error) {
	n, err := r.ArrayLen()
	if err != nil || n <= 0 {
		return 0, err
	}
	if n != 1 {
		return 0, fmt.Errorf("%w: %d streams", ErrProtocol, n)
	}
	if n, err = r.Array(); err != nil {
		return 0, err
	}
	if n != 2 {
		return 0, fmt.Errorf("%w: stream of %d elements", ErrProtocol, n)
	}
	if _, err := r.Bulk(); err != nil { // the stream's name
		return 0, err
	}
	return r.entries(most)
}

// AutoClaimReply reads the head of an XAUTOCLAIM reply, [next cursor, [entry …], deleted ids]
// (the third from Redis 7 on; before, an entry whose data is gone comes with a null field list):
// the cursor, how many entries follow (at most most), and whether Deleted is to be read after
// them.
func (r *Reader) AutoClaimReply(most int) (next string, entries int, deleted bool, err error) {
	n, err := r.Array()
	if err != nil {
		return "", 0, false, err
	}
	if n != 2 && n != 3 {
		return "", 0, false, fmt.Errorf("%w: xautoclaim reply of %d elements", ErrProtocol, n)
	}
	if next, err = r.String(); err != nil {
		return "", 0, false, err
	}
	entries, err = r.entries(most)
	return next, entries, n == 3, err
}

// ClaimReply reads the head of an XCLAIM reply, [entry …], and returns how many entries follow,
// at most most (an entry whose data is gone comes with a null field list before Redis 7).
func (r *Reader) ClaimReply(most int) (int, error) { return r.entries(most) }

// Deleted reads the ids of an XAUTOCLAIM reply whose data is gone.
func (r *Reader) Deleted() ([]string, error) {
	n, err := r.Array()
	if err != nil {
		return nil, err
	}
	var ids []string
	for range n {
		id, err := r.String()
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (r *Reader) entries(most int) (int, error) {
	n, err := r.Array()
	if err == nil && n > most {
		return 0, fmt.Errorf("%w: %d entries where at most %d were asked for", ErrProtocol, n, most)
	}
	return n, err
}

// Entry reads a stream entry's head, [id, [field, value, …]]: its id and the number of pairs that
// follow. pairs is -1 where the entry's data is gone (a null field list): nothing follows.
func (r *Reader) Entry() (id string, pairs int, err error) {
	b, err := r.EntryID()
	if err != nil {
		return "", 0, err
	}
	id = string(b)
	if pairs, err = r.EntryFields(); err != nil {
		return "", 0, err
	}
	return id, pairs, nil
}

// EntryID reads the first half of Entry, the entry's head and its id, into a slice valid until
// the next read: for a caller that keeps its own copy before EntryFields.
func (r *Reader) EntryID() ([]byte, error) {
	if m, err := r.Array(); err != nil {
		return nil, err
	} else if m != 2 {
		return nil, fmt.Errorf("%w: entry of %d elements", ErrProtocol, m)
	}
	return r.Bulk()
}

// EntryFields reads the second half of Entry: the number of pairs that follow, -1 where the
// entry's data is gone.
func (r *Reader) EntryFields() (pairs int, err error) {
	nf, err := r.ArrayLen()
	if err != nil {
		return 0, err
	}
	if nf < 0 {
		return -1, nil
	}
	if nf%2 != 0 {
		return 0, fmt.Errorf("%w: odd field list", ErrProtocol)
	}
	return nf / 2, nil
}

// PendingReply reads the head of an extended XPENDING reply (a null array reads as empty) and
// returns how many entries follow, at most most, each read with Pending.
func (r *Reader) PendingReply(most int) (int, error) {
	n, err := r.ArrayLen()
	if err != nil || n <= 0 {
		return 0, err
	}
	if n > most {
		return 0, fmt.Errorf("%w: %d pending entries where at most %d were asked for", ErrProtocol, n, most)
	}
	return n, nil
}

// Pending reads one entry of an extended XPENDING reply, [id, consumer, idle ms, delivery
// count]; the consumer is passed over (the one the command named).
func (r *Reader) Pending() (id string, idle time.Duration, count int64, err error) {
	b, err := r.PendingID()
	if err != nil {
		return "", 0, 0, err
	}
	id = string(b)
	if idle, count, err = r.PendingCounts(); err != nil {
		return "", 0, 0, err
	}
	return id, idle, count, nil
}

// PendingID reads the first part of Pending, the entry's head and its id, into a slice valid
// until the next read: for a caller that keeps its own copy before PendingCounts.
func (r *Reader) PendingID() ([]byte, error) {
	if m, err := r.Array(); err != nil {
		return nil, err
	} else if m != 4 {
		return nil, fmt.Errorf("%w: xpending entry of %d elements", ErrProtocol, m)
	}
	return r.Bulk()
}

// PendingCounts reads the rest of Pending: the idle time and the delivery count.
func (r *Reader) PendingCounts() (idle time.Duration, count int64, err error) {
	if _, err = r.Bulk(); err != nil {
		return 0, 0, err
	}
	ms, err := r.Int()
	if err != nil {
		return 0, 0, err
	}
	if count, err = r.Int(); err != nil {
		return 0, 0, err
	}
	return time.Duration(ms) * time.Millisecond, count, nil
}
