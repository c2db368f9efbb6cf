package codec

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

func TestRecordCopy(t *testing.T) {
	copyMsg := &engine.Message{Key: "orders", Headers: map[string]string{"x-retry-count": "1"}, Payload: []byte("p")}
	tests := []struct {
		name     string
		st       engine.Settlement
		retryKey string
		key      string // of the record; "" when nothing is written
		err      error
	}{
		{"ack writes nothing", engine.Settlement{Action: engine.ActAck}, "", "", nil},
		{"requeue under its own key", engine.Settlement{Action: engine.ActRequeue, Copy: copyMsg}, "", "orders", nil},
		{"requeue under the retry key", engine.Settlement{Action: engine.ActRequeue, Copy: copyMsg}, "orders.retry", "orders.retry", nil},
		{"dead letter", engine.Settlement{Action: engine.ActDeadLetter, Copy: copyMsg, DeadLetterKey: "dlq"}, "orders.retry", "dlq", nil},
		{"dead letter without a key", engine.Settlement{Action: engine.ActDeadLetter, Copy: copyMsg}, "", "", engine.ErrPermanent},
		{"no copy", engine.Settlement{Action: engine.ActRequeue}, "", "", engine.ErrPermanent},
		{"leave", engine.Settlement{Action: engine.ActLeave, Copy: copyMsg}, "", "", engine.ErrUnsupported},
		{"delay", engine.Settlement{Action: engine.ActDelay, Copy: copyMsg}, "", "", engine.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := RecordCopy(tt.st, tt.retryKey)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			switch {
			case tt.key == "" && c != nil:
				t.Fatalf("record %+v, want none", c)
			case tt.key != "" && (c == nil || c.Key != tt.key || string(c.Payload) != "p" || c.Headers["x-retry-count"] != "1"):
				t.Fatalf("record %+v, want key %q", c, tt.key)
			}
			if copyMsg.Key != "orders" {
				t.Fatal("RecordCopy changed the settlement's copy")
			}
		})
	}
}

func TestClassifyWrite(t *testing.T) {
	path := func(errno syscall.Errno) error { return &os.PathError{Op: "write", Path: "f", Err: errno} }
	tests := []struct {
		err       error
		reason    string
		permanent bool
	}{
		{fmt.Errorf("x: %w", engine.ErrUnsupported), "unsupported", true},
		{fmt.Errorf("x: %w", engine.ErrPermanent), "invalid", true},
		{path(syscall.EPIPE), "closed", true},
		{os.ErrClosed, "closed", true},
		{path(syscall.EACCES), "permission", true},
		{path(syscall.EROFS), "read_only", true},
		{path(syscall.ENOENT), "not_found", true},
		{path(syscall.ENOSPC), "no_space", false},
		{path(syscall.EDQUOT), "no_space", false},
		{path(syscall.EIO), "io", false},
		{path(syscall.EAGAIN), "error", false},
	}
	for _, tt := range tests {
		if r, p := ClassifyWrite(tt.err); r != tt.reason || p != tt.permanent {
			t.Errorf("ClassifyWrite(%v) = %s %v, want %s %v", tt.err, r, p, tt.reason, tt.permanent)
		}
	}
}
