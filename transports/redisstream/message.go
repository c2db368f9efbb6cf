package redisstream

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// A delayed copy (durable_zset) is stored as one sorted-set member, a JSON object that the
// move-back Lua script decodes with cjson:
//
//	{"v":1,"key":"<stream>","id":"<original entry id>","f":["name","value",...,"payload","..."]}
//
// "f" is exactly the XADD field list (codec.StreamFields). The original id makes the member
// unique per delivery, and a re-sent settlement only rewrites the same member's score. Strings are written
// byte for byte (only '"', '\' and control bytes are escaped), because cjson passes raw bytes
// through while it would turn a \u00XX escape above 0x7f into UTF-8: a binary payload survives.

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
	b = appendRawJSONString(b, key)
	b = append(b, `,"id":`...)
	b = appendRawJSONString(b, origID)
	b = append(b, `,"f":[`...)
	for i, s := range f {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRawJSONString(b, s)
	}
	b = append(b, "]}"...)
	return string(b)
}

// appendRawJSONString is deliberately not codec.AppendJSONString: that one writes invalid UTF-8 as
// \ufffd, and a member must keep every byte (see above).
func appendRawJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// DecodeDelayed decodes a delay-queue member written by a durable_zset source, byte-exact, for
// tools that list the queue (flowrun inspect) and for tests.
func DecodeDelayed(member string) (Delayed, error) {
	p := parser{s: member}
	var d Delayed
	var fields []string
	if err := p.object(func(name string) error {
		switch name {
		case "v":
			_, err := p.number()
			return err
		case "key":
			s, err := p.str()
			d.Key = s
			return err
		case "id":
			s, err := p.str()
			d.OriginalID = s
			return err
		case "f":
			return p.array(func() error {
				s, err := p.str()
				fields = append(fields, s)
				return err
			})
		}
		return fmt.Errorf("unknown member field %q", name)
	}); err != nil {
		return Delayed{}, fmt.Errorf("redisstream: decode delayed member: %w", err)
	}
	p.space()
	if p.i != len(p.s) {
		return Delayed{}, errors.New("redisstream: decode delayed member: trailing data")
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

// parser is a minimal JSON reader for the member format. encoding/json cannot be used: it
// replaces invalid UTF-8 in strings, and payloads are bytes. Nor can codec's JSON walkers: they
// read only what json.Valid accepted (which rejects such bytes) and do not report errors.
type parser struct {
	s string
	i int
}

func (p *parser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) expect(c byte) error {
	p.space()
	if p.i >= len(p.s) || p.s[p.i] != c {
		return fmt.Errorf("offset %d: want %q", p.i, c)
	}
	p.i++
	return nil
}

func (p *parser) peek() byte {
	p.space()
	if p.i >= len(p.s) {
		return 0
	}
	return p.s[p.i]
}

func (p *parser) object(member func(name string) error) error {
	if err := p.expect('{'); err != nil {
		return err
	}
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		name, err := p.str()
		if err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := member(name); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return fmt.Errorf("offset %d: want ',' or '}'", p.i)
		}
	}
}

func (p *parser) array(elem func() error) error {
	if err := p.expect('['); err != nil {
		return err
	}
	if p.peek() == ']' {
		p.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return nil
		default:
			return fmt.Errorf("offset %d: want ',' or ']'", p.i)
		}
	}
}

func (p *parser) number() (float64, error) {
	p.space()
	j := p.i
	for j < len(p.s) && (p.s[j] == '-' || p.s[j] == '+' || p.s[j] == '.' || p.s[j] == 'e' || p.s[j] == 'E' || (p.s[j] >= '0' && p.s[j] <= '9')) {
		j++
	}
	f, err := strconv.ParseFloat(p.s[p.i:j], 64)
	if err != nil {
		return 0, fmt.Errorf("offset %d: bad number", p.i)
	}
	p.i = j
	return f, nil
}

func (p *parser) str() (string, error) {
	if err := p.expect('"'); err != nil {
		return "", err
	}
	var b []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), nil
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			break
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", fmt.Errorf("offset %d: bad \\u escape", p.i)
			}
			if utf16.IsSurrogate(r) && p.i+1 < len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
				save := p.i
				p.i += 2
				if r2, ok := p.hex4(); ok {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						b = utf8.AppendRune(b, d)
						continue
					}
				}
				p.i = save
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", fmt.Errorf("offset %d: bad escape", p.i)
		}
	}
	return "", errors.New("unterminated string")
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 16)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}
