package codec

import (
	"unicode/utf8"
	"unsafe"
)

// The helpers below walk JSON that encoding/json.Valid has already accepted, so they only need
// to find boundaries, never to report syntax errors. That keeps the hot path free of reflection.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just past the string literal starting at b[i] == '"', and
// whether it contains an escape.
func skipString(b []byte, i int) (int, bool) {
	escaped := false
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			return i + 1, escaped
		}
	}
	return i, escaped
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		j, _ := skipString(b, i)
		return j
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i, _ = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// objectIter walks the members of a valid JSON object.
type objectIter struct {
	b       []byte
	i       int
	started bool
	name    []byte // scratch for names with escapes
}

// newObjectIter returns an iterator over the object at b[i] (b[i] must be '{').
func newObjectIter(b []byte, i int) objectIter { return objectIter{b: b, i: i + 1} }

// next returns the next member's name (decoded) and raw value, or ok == false at the end.
// The name is only valid until the next call.
func (it *objectIter) next() (name, value []byte, ok bool) {
	b := it.b
	i := skipSpace(b, it.i)
	if it.started {
		if i >= len(b) || b[i] != ',' {
			return nil, nil, false
		}
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return nil, nil, false
	}
	it.started = true
	end, escaped := skipString(b, i)
	if escaped {
		it.name = appendUnescaped(it.name[:0], b[i+1:end-1])
		name = it.name
	} else {
		name = b[i+1 : end-1]
	}
	i = skipSpace(b, end)
	i = skipSpace(b, i+1) // past ':'
	vend := skipValue(b, i)
	it.i = vend
	return name, b[i:vend], true
}

// unquote returns the bytes of a valid JSON string literal as a new slice.
func unquote(lit []byte) []byte {
	body := lit[1 : len(lit)-1]
	for _, c := range body {
		if c == '\\' {
			return appendUnescaped(make([]byte, 0, len(body)), body)
		}
	}
	out := make([]byte, len(body))
	copy(out, body)
	return out
}

// unquoteString is unquote for a Go string, with a single allocation on the common path.
func unquoteString(lit []byte) string {
	body := lit[1 : len(lit)-1]
	for _, c := range body {
		if c == '\\' {
			b := appendUnescaped(make([]byte, 0, len(body)), body)
			return unsafe.String(unsafe.SliceData(b), len(b))
		}
	}
	return string(body)
}

// unquoteText is unquoteString for text that must be UTF-8: header names and values, a record's
// key. JSON text is UTF-8, yet json.Valid lets raw invalid bytes through inside strings; each
// such byte becomes U+FFFD here, at first read, as encoding/json reads it and as appendJSONQuoted
// would write it. Kept raw, the message would change on its first copy (written as \ufffd) and
// again on the copy of that copy (written as the character itself): the two would differ.
func unquoteText(lit []byte) string { return validText(unquoteString(lit)) }

// validText returns s with each byte that is not part of valid UTF-8 replaced by U+FFFD (one
// for each byte, unlike strings.ToValidUTF8, which replaces a run with one), s itself when valid.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendUnescaped decodes the escapes of a valid JSON string body. Invalid surrogates become
// U+FFFD, as encoding/json does; raw bytes are kept as they are.
func appendUnescaped(dst, s []byte) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[i+1:])
			i += 4
			if utf16IsHigh(r) {
				if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if lo := hex4(s[i+3:]); utf16IsLow(lo) {
						r = (r-0xD800)<<10 + (lo - 0xDC00) + 0x10000
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			} else if utf16IsLow(r) {
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, s[i])
		}
	}
	return dst
}

func utf16IsHigh(r rune) bool { return r >= 0xD800 && r < 0xDC00 }
func utf16IsLow(r rune) bool  { return r >= 0xDC00 && r < 0xE000 }

func hex4(s []byte) rune {
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendCompact appends a valid JSON value without insignificant whitespace.
func appendCompact(dst, v []byte) []byte {
	if !hasSpace(v) {
		return append(dst, v...)
	}
	inString := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			dst = append(dst, c)
			switch c {
			case '\\':
				i++
				dst = append(dst, v[i])
			case '"':
				inString = false
			}
			continue
		}
		if isSpace(c) {
			continue
		}
		if c == '"' {
			inString = true
		}
		dst = append(dst, c)
	}
	return dst
}

func hasSpace(v []byte) bool {
	for _, c := range v {
		if isSpace(c) {
			return true
		}
	}
	return false
}

const hexDigits = "0123456789abcdef"

// appendQuoted appends s as a record's JSON string literal (see appendJSONQuoted). Records write
// \b and \f as \u0008 and \u000c, as they always have: the wire format stays byte for byte.
func appendQuoted(dst, s []byte) []byte { return appendJSONQuoted(dst, s, false) }

// appendQuotedString is appendQuoted for a string, without copying it.
func appendQuotedString(dst []byte, s string) []byte {
	return appendJSONQuoted(dst, unsafe.Slice(unsafe.StringData(s), len(s)), false)
}

// AppendJSONString appends s as a JSON string literal exactly as encoding/json writes it with
// HTML escaping off (SetEscapeHTML(false)): '"', '\\' and control characters escaped (\b, \f, \n,
// \r, \t short, the others as \u00XX), invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func AppendJSONString(dst []byte, s string) []byte {
	return appendJSONQuoted(dst, unsafe.Slice(unsafe.StringData(s), len(s)), true)
}

// appendJSONQuoted appends s as a JSON string literal. Invalid UTF-8 becomes U+FFFD (a JSON text
// must be UTF-8); U+2028 and U+2029 are escaped so a line stays one line for every reader.
// shortBF writes \b and \f as encoding/json does (since Go 1.22) rather than as \u0008 and \u000c:
// the one difference between records and AppendJSONString.
func appendJSONQuoted(dst, s []byte, shortBF bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\b' && shortBF:
				dst = append(dst, '\\', 'b')
			case c == '\f' && shortBF:
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
