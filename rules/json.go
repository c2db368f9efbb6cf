package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/flowrun/flowrun/codec"
)

// marshalJSON returns v's JSON text as encoding/json writes it with HTML escaping off (a payload
// is data, not a web page). The values expr builds (maps from literals, arrays, strings, numbers,
// booleans, nil) are appended directly, which saves encoding/json's reflection and per-entry
// allocations on every emit; anything else goes through encoding/json.
func marshalJSON(v any) ([]byte, error) {
	if b, ok := appendJSON(make([]byte, 0, 64), v); ok {
		return b, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// appendJSON appends v's JSON text to b, byte for byte as encoding/json would. It reports false
// when v holds a type it does not handle, or a value encoding/json refuses (NaN, infinities).
func appendJSON(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, v), true
	case string:
		return codec.AppendJSONString(b, v), true
	case int:
		return strconv.AppendInt(b, int64(v), 10), true
	case int64:
		return strconv.AppendInt(b, v, 10), true
	case float64:
		return appendJSONFloat(b, v)
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendJSON(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		var arr [16]string
		keys := arr[:0]
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = codec.AppendJSONString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendJSON(b, v[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

// appendJSONFloat formats like encoding/json: ES6 number formatting.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
