package codec

import (
	"strconv"
	"unicode/utf8"
)

// DecodeFlat decodes a JSON object whose values are all plain (strings and keys without
// escapes, numbers, true, false, null) into what json.Unmarshal into an any gives: a
// map[string]any of string, float64, bool and nil, the last of a repeated key kept. It reports
// false, having decided nothing, for anything else (nested values, escapes, invalid text,
// numbers out of float64's range), which json.Unmarshal then decodes or refuses: the usual
// payload, a flat object, is read without encoding/json's reflection and validating pass. Its
// keys and strings share one copy of b (one allocation, not one each).
func DecodeFlat(b []byte) (map[string]any, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	str := string(b)
	m := make(map[string]any)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, skipSpace(b, i+1) == len(b)
	}
	for {
		k, j, ok := plainString(b, str, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		var v any
		if v, i, ok = plainValue(b, str, i); !ok {
			return nil, false
		}
		m[k] = v
		i = skipSpace(b, i)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return m, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainString reads the string at b[i] that has no escapes, no control characters and valid
// UTF-8 (read by encoding/json as it is), returning it (of str, b's copy) and the index after
// its closing quote.
func plainString(b []byte, str string, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	ascii := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !ascii && !utf8.Valid(s) {
				return "", 0, false
			}
			return str[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", 0, false
}

// plainValue reads a string, number, true, false or null at b[i].
func plainValue(b []byte, str string, i int) (any, int, bool) {
	if i >= len(b) {
		return nil, 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return plainString(b, str, i)
	case c == '-' || (c >= '0' && c <= '9'):
		j, ok := numberEnd(b, i)
		if !ok {
			return nil, 0, false
		}
		f, err := strconv.ParseFloat(str[i:j], 64)
		if err != nil {
			return nil, 0, false // out of range: json.Unmarshal refuses it
		}
		return f, j, true
	case hasWord(b, i, "true"):
		return true, i + 4, true
	case hasWord(b, i, "false"):
		return false, i + 5, true
	case hasWord(b, i, "null"):
		return nil, i + 4, true
	}
	return nil, 0, false
}

func hasWord(b []byte, i int, w string) bool {
	return len(b)-i >= len(w) && string(b[i:i+len(w)]) == w
}

// numberEnd is the index after the JSON number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func numberEnd(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
