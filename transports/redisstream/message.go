package redisstream

import (
	"fmt"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// A delayed copy (durable_zset) is stored as one sorted-set member, a JSON object that the
// move-back Lua script decodes with cjson:
//
//	{"v":1,"key":"<stream>","id":"<original entry id>","f":["name","value",...,"payload","..."]}
//
// "f" is exactly the XADD field list (codec.StreamFields). The original id makes the member
// unique per delivery, and a re-sent settlement only rewrites the same member's score. It is raw
// JSON (codec.RawJSON): strings are written byte for byte (only '"', '\' and control bytes are
// escaped), because cjson passes raw bytes through while it would turn a \u00XX escape above 0x7f
// into UTF-8: a binary payload survives.

// Delayed is a decoded delay-queue member.
type Delayed struct {
	Key        string // the stream the copy goes back to
	OriginalID string // the entry the copy replaces
	Message    *engine.Message
}

func encodeDelayed(key, origID string, m *engine.Message) string {
	f := codec.StreamFields(m)
	b := make([]byte, 0, 64+len(key)+len(origID)+len(m.Payload)+16*len(f))
	b = append(b, `{"v":1,"key":`...)
	b = codec.AppendRawJSONString(b, key)
	b = append(b, `,"id":`...)
	b = codec.AppendRawJSONString(b, origID)
	b = append(b, `,"f":[`...)
	for i, s := range f {
		if i > 0 {
			b = append(b, ',')
		}
		b = codec.AppendRawJSONString(b, s)
	}
	b = append(b, "]}"...)
	return string(b)
}

// DecodeDelayed decodes a delay-queue member written by a durable_zset source, byte-exact, for
// tools that list the queue (flowrun inspect) and for tests.
func DecodeDelayed(member string) (Delayed, error) {
	p := codec.NewRawJSON(member)
	var d Delayed
	var fields []string
	if err := p.Object(func(name string) error {
		switch name {
		case "v":
			_, err := p.Number()
			return err
		case "key":
			s, err := p.String()
			d.Key = s
			return err
		case "id":
			s, err := p.String()
			d.OriginalID = s
			return err
		case "f":
			return p.Array(func() error {
				s, err := p.String()
				fields = append(fields, s)
				return err
			})
		}
		return fmt.Errorf("unknown member field %q", name)
	}); err != nil {
		return Delayed{}, fmt.Errorf("redisstream: decode delayed member: %w", err)
	}
	if err := p.End(); err != nil {
		return Delayed{}, fmt.Errorf("redisstream: decode delayed member: %w", err)
	}
	if len(fields) == 0 || len(fields)%2 != 0 {
		return Delayed{}, fmt.Errorf("redisstream: decode delayed member: %d fields, want a non-zero even number", len(fields))
	}
	m := &engine.Message{Key: d.Key, Headers: make(map[string]string, len(fields)/2)}
	for i := 0; i < len(fields); i += 2 {
		if fields[i] == codec.StreamPayloadField {
			m.Payload = []byte(fields[i+1])
		} else {
			m.Headers[fields[i]] = fields[i+1]
		}
	}
	d.Message = m
	return d, nil
}
