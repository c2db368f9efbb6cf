package codec

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"
)

// Raw JSON is JSON whose strings hold bytes, not text: only '"', '\\' and control bytes are
// escaped, every other byte is written as it is, invalid UTF-8 included. A Lua script's cjson
// reads it so (it passes raw bytes through, while it would turn a \u00XX escape above 0x7f into
// UTF-8), which is why the stream transport's delay-queue members are written this way: a
// binary payload survives. encoding/json cannot read it (it replaces invalid UTF-8), nor can
// this package's walkers of valid JSON (json.Valid rejects it, and they report no errors), so
// RawJSON reads it, with the walkers' unescaping.

// AppendRawJSONString appends s as a raw JSON string. It is not AppendJSONString on purpose:
// that one writes invalid UTF-8 as \ufffd.
func AppendRawJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// RawJSON reads raw JSON, reporting where it is malformed: objects, arrays, strings and numbers
// (no true, false or null, which raw JSON writers here do not write).
type RawJSON struct {
	s string
	i int
}

// NewRawJSON reads s.
func NewRawJSON(s string) *RawJSON { return &RawJSON{s: s} }

func (p *RawJSON) space() {
	for p.i < len(p.s) && isSpace(p.s[p.i]) {
		p.i++
	}
}

func (p *RawJSON) expect(c byte) error {
	p.space()
	if p.i >= len(p.s) || p.s[p.i] != c {
		return fmt.Errorf("offset %d: want %q", p.i, c)
	}
	p.i++
	return nil
}

func (p *RawJSON) peek() byte {
	p.space()
	if p.i >= len(p.s) {
		return 0
	}
	return p.s[p.i]
}

// End reports an error unless only white space is left.
func (p *RawJSON) End() error {
	p.space()
	if p.i != len(p.s) {
		return errors.New("trailing data")
	}
	return nil
}

// Object reads an object, calling member with each member's name to read its value.
func (p *RawJSON) Object(member func(name string) error) error {
	if err := p.expect('{'); err != nil {
		return err
	}
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		name, err := p.String()
		if err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := member(name); err != nil {
			return err
		}
		if done, err := p.more('}'); done || err != nil {
			return err
		}
	}
}

// Array reads an array, calling elem to read each element.
func (p *RawJSON) Array(elem func() error) error {
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
		if done, err := p.more(']'); done || err != nil {
			return err
		}
	}
}

// more reads the ',' before another member or element, or the closing byte.
func (p *RawJSON) more(closing byte) (done bool, err error) {
	switch p.peek() {
	case ',':
		p.i++
		return false, nil
	case closing:
		p.i++
		return true, nil
	}
	return false, fmt.Errorf("offset %d: want ',' or %q", p.i, closing)
}

// Number reads a number.
func (p *RawJSON) Number() (float64, error) {
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

// String reads a string: its bytes as they are, its escapes decoded as the walkers decode them
// (a lone surrogate becomes U+FFFD).
func (p *RawJSON) String() (string, error) {
	if err := p.expect('"'); err != nil {
		return "", err
	}
	start, escaped := p.i, false
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '"':
			body := p.s[start:p.i]
			p.i++
			if !escaped {
				return body, nil
			}
			b := appendUnescaped(make([]byte, 0, len(body)), unsafe.Slice(unsafe.StringData(body), len(body)))
			return unsafe.String(unsafe.SliceData(b), len(b)), nil
		case '\\':
			escaped = true
			if err := p.escape(); err != nil {
				return "", err
			}
		default:
			p.i++
		}
	}
	return "", errors.New("unterminated string")
}

// escape checks the escape at p.i and moves past it.
func (p *RawJSON) escape() error {
	if p.i+1 >= len(p.s) {
		return errors.New("unterminated string")
	}
	switch p.s[p.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		p.i += 2
		return nil
	case 'u':
		if p.i+6 <= len(p.s) {
			if _, err := strconv.ParseUint(p.s[p.i+2:p.i+6], 16, 16); err == nil {
				p.i += 6
				return nil
			}
		}
		return fmt.Errorf("offset %d: bad \\u escape", p.i+2)
	}
	return fmt.Errorf("offset %d: bad escape", p.i+2)
}
