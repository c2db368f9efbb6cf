package status

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
)

// The budget of a filter expression a visitor sends (SPEC §15 "Hostile content"): whoever can
// reach the page can send one, so none may make flowrun stop settling, grow without bound, or
// stop answering /healthz. The limits are checked before the expression is parsed (size,
// nesting, the constructs that build values larger than their inputs), while it runs (expr-lang's
// memory budget per letter, the time over the whole walk), and around it (one at a time per
// client address, a few at once in all).
const (
	maxWhereBytes   = 4 << 10
	maxWhereNesting = 32
	filterTime      = 2 * time.Second
	// filterMemory is expr-lang's memory budget for one evaluation, in its units (an element
	// of a range, array or map): 100,000 is a few MiB at most.
	filterMemory = 100_000
	maxFilters   = 4 // running at once, all clients together
)

// refusedWords build values larger than their inputs (a string repeated, a range mapped to
// copies, an accumulator): with them a 4 KiB expression could ask for gigabytes. A filter that
// needs them runs in `flowrun dlq list --where`, outside the server.
var refusedWords = []string{"let", "repeat", "replace", "map", "reduce"}

// errFilterTime and errFilterMemory end a walk over the letters: the request is answered 400.
var (
	errFilterTime   = fmt.Errorf("where: the filter ran longer than its limit of %v; narrow it, or use flowrun dlq list --where", filterTime)
	errFilterMemory = fmt.Errorf("where: the filter needs more memory than its budget of %d expr-lang units (elements of ranges, arrays and maps) per letter", filterMemory)
)

// checkWhere refuses an expression over a static limit, before it is parsed: its size, how deep
// its brackets nest, and the refused words (outside string literals and member names).
func checkWhere(where string) error {
	if len(where) > maxWhereBytes {
		return fmt.Errorf("where: the expression is %d bytes, over the limit of 4 KiB (%d bytes)", len(where), maxWhereBytes)
	}
	depth, line, col := 0, 1, 0
	var quote rune
	escaped, member := false, false
	rs := []rune(where)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		col++
		if r == '\n' {
			line, col = line+1, 0
		}
		if quote != 0 {
			switch {
			case escaped:
				escaped = false
			case r == '\\' && quote != '`':
				escaped = true
			case r == quote:
				quote = 0
			}
			continue
		}
		switch {
		case r == '"' || r == '\'' || r == '`':
			quote = r
		case r == '(' || r == '[' || r == '{':
			if depth++; depth > maxWhereNesting {
				return fmt.Errorf("where: brackets nested deeper than the limit of %d levels (at %d:%d)", maxWhereNesting, line, col)
			}
		case r == ')' || r == ']' || r == '}':
			depth--
		case unicode.IsLetter(r) || r == '_' || r == '$':
			j := i
			for j < len(rs) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j]) || rs[j] == '_' || rs[j] == '$') {
				j++
			}
			word := string(rs[i:j])
			if !member {
				for _, w := range refusedWords {
					if word == w {
						return fmt.Errorf("where: %q at %d:%d is not allowed in a filter sent to the status page (it builds values larger than its inputs); use flowrun dlq list --where", w, line, col)
					}
				}
			}
			col += j - i - 1
			i = j - 1
		}
		if !unicode.IsSpace(r) {
			member = r == '.'
		}
	}
	return nil
}

// clientSlots bounds work a visitor asks for (a filter, a list of runs): one at a time per
// client address, maxFilters in all. busy and full (a format of that count) are the refusals.
type clientSlots struct {
	busy, full string
	mu         sync.Mutex
	clients    map[string]bool
}

// take returns a release, or the reason the request must wait (answered 429).
// filterSlots are the dead-letter filters' slots.
func filterSlots() *clientSlots {
	return &clientSlots{
		busy: "where: a filter sent from this address is still running; one at a time per client",
		full: "where: %d filters are running, the most at once; try again shortly",
	}
}

// scanSlots are the slots of lists of runs (runs.go): each walks every run kept.
func scanSlots() *clientSlots {
	return &clientSlots{
		busy: "runs: a list of runs sent from this address is still being read; one at a time per client",
		full: "runs: %d lists of runs are being read, the most at once; try again shortly",
	}
}

func (s *clientSlots) take(r *http.Request) (func(), error) {
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients == nil {
		s.clients = map[string]bool{}
	}
	switch {
	case s.clients[client]:
		return nil, errors.New(s.busy)
	case len(s.clients) >= maxFilters:
		return nil, fmt.Errorf(s.full, maxFilters)
	}
	s.clients[client] = true
	return func() {
		s.mu.Lock()
		delete(s.clients, client)
		s.mu.Unlock()
	}, nil
}

// budgetFault turns a filter's error on one letter into the end of the walk when it is the
// memory budget; other errors (a text payload read as a number) count as not matching.
func budgetFault(err error) error {
	if err != nil && strings.Contains(err.Error(), "memory budget exceeded") {
		return errFilterMemory
	}
	return nil
}
