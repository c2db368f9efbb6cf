package codec

import (
	"errors"
	"io"
	"strings"
	"testing"
)

type step struct {
	line string
	size int
	err  error
}

func readAll(lr *LineReader) []step {
	var got []step
	for {
		l, n, err := lr.Next()
		if err == io.EOF {
			return got
		}
		got = append(got, step{string(l), n, err})
	}
}

func TestLineReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		want    []step
		pending int
	}{
		{"lines", "a\nbb\n\nccc\n", 0, []step{{"a", 2, nil}, {"bb", 3, nil}, {"", 1, nil}, {"ccc", 4, nil}}, 0},
		{"unfinished last line", "a\nbb", 0, []step{{"a", 2, nil}}, 2},
		{"too long skipped", "ab\n" + strings.Repeat("x", 11) + "\ncd\n", 10, []step{{"ab", 3, nil}, {"", 12, ErrLineTooLong}, {"cd", 3, nil}}, 0},
		{"exactly max", strings.Repeat("x", 10) + "\n", 10, []step{{strings.Repeat("x", 10), 11, nil}}, 0},
		{"longer than the buffer", strings.Repeat("z", 200<<10) + "\nq\n", 0, []step{{strings.Repeat("z", 200<<10), 200<<10 + 1, nil}, {"q", 2, nil}}, 0},
		{"too long beyond the buffer", strings.Repeat("z", 200<<10) + "\nq\n", 100 << 10, []step{{"", 200<<10 + 1, ErrLineTooLong}, {"q", 2, nil}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := NewLineReader(strings.NewReader(tt.in), tt.max)
			got := readAll(lr)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if got[i].line != tt.want[i].line || got[i].size != tt.want[i].size || !errors.Is(got[i].err, tt.want[i].err) {
					t.Errorf("line %d = %q/%d/%v, want %q/%d/%v", i, trunc(got[i].line), got[i].size, got[i].err, trunc(tt.want[i].line), tt.want[i].size, tt.want[i].err)
				}
			}
			if lr.Pending() != tt.pending {
				t.Errorf("Pending = %d, want %d", lr.Pending(), tt.pending)
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// A growing input: an unfinished line at EOF is continued by the next read.
func TestLineReaderGrowing(t *testing.T) {
	var src growing
	lr := NewLineReader(&src, 0)
	src.data = "one\ntw"
	if l, n, err := lr.Next(); err != nil || string(l) != "one" || n != 4 {
		t.Fatalf("Next = %q %d %v", l, n, err)
	}
	if _, _, err := lr.Next(); err != io.EOF || lr.Pending() != 2 {
		t.Fatalf("Next = %v pending %d, want EOF with 2 pending", err, lr.Pending())
	}
	src.data += "o\nthree"
	if l, n, err := lr.Next(); err != nil || string(l) != "two" || n != 4 {
		t.Fatalf("Next = %q %d %v", l, n, err)
	}
	if _, _, err := lr.Next(); err != io.EOF {
		t.Fatalf("Next = %v, want EOF", err)
	}
	l, n, err := lr.TakePending()
	if err != nil || string(l) != "three" || n != 5 || lr.Pending() != 0 {
		t.Fatalf("TakePending = %q %d %v (pending %d)", l, n, err, lr.Pending())
	}
}

// growing is a reader whose data can be extended after it returned io.EOF, like a file.
type growing struct {
	data string
	off  int
}

func (g *growing) Read(p []byte) (int, error) {
	if g.off >= len(g.data) {
		return 0, io.EOF
	}
	n := copy(p, g.data[g.off:])
	g.off += n
	return n, nil
}
