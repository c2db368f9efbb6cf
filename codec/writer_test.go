package codec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

// countingWriter records each Write call separately.
type countingWriter struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func TestLineWriterConcurrent(t *testing.T) {
	var w countingWriter
	lw := NewLineWriter(&w)
	const goroutines, perG = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				m1 := &engine.Message{Key: fmt.Sprintf("g%d", g), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
				m2 := &engine.Message{Key: fmt.Sprintf("g%d", g), Payload: []byte(strings.Repeat("x", 5000))}
				if err := lw.WriteRecords(m1, m2); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if len(w.writes) != goroutines*perG {
		t.Fatalf("%d writes, want one per call (%d)", len(w.writes), goroutines*perG)
	}
	all := bytes.Join(w.writes, nil)
	lines := strings.Split(strings.TrimSuffix(string(all), "\n"), "\n")
	if len(lines) != 2*goroutines*perG {
		t.Fatalf("%d lines, want %d", len(lines), 2*goroutines*perG)
	}
	for i, l := range lines {
		if _, err := DecodeRecord([]byte(l)); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
	}
}

func TestLineWriterError(t *testing.T) {
	lw := NewLineWriter(errWriter{})
	err := lw.WriteRecords(&engine.Message{Key: "k"})
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("err = %v, want io.ErrClosedPipe", err)
	}
}

type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

func TestRecordSink(t *testing.T) {
	var buf bytes.Buffer
	s := NewRecordSink(NewLineWriter(&buf))
	err := s.Publish(context.Background(),
		&engine.Message{Key: "done", Headers: map[string]string{"source": "flowrun"}, Payload: []byte(`{"id":1}`)},
		&engine.Message{Key: "done", Payload: []byte("text")})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"key":"done","headers":{"source":"flowrun"},"payload":{"id":1}}` + "\n" + `{"key":"done","payload":"text"}` + "\n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestFileSink(t *testing.T) {
	tests := []struct {
		name, existing, want string
	}{
		{"new file", "", `{"key":"a","payload":1}` + "\n" + `{"key":"b","payload":"x"}` + "\n"},
		{"appends", `{"key":"old"}` + "\n", `{"key":"old"}` + "\n" + `{"key":"a","payload":1}` + "\n" + `{"key":"b","payload":"x"}` + "\n"},
		{"last line without newline", `{"key":"old"}`, `{"key":"old"}` + "\n" + `{"key":"a","payload":1}` + "\n" + `{"key":"b","payload":"x"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.jsonl")
			if tt.existing != "" {
				if err := os.WriteFile(path, []byte(tt.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := NewFileSink(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := s.Publish(ctx, &engine.Message{Key: "a", Payload: []byte("1")}); err != nil {
				t.Fatal(err)
			}
			if err := s.Publish(ctx, &engine.Message{Key: "b", Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			c := s.(io.Closer)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := s.Publish(ctx, &engine.Message{Key: "c"}); !errors.Is(err, os.ErrClosed) {
				t.Fatalf("Publish after Close: %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("file =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestFileSinkConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	// Two appenders on one path, as a source's copies and an emit may be.
	a1, err := OpenFileAppender(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	a2, err := OpenFileAppender(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	big := strings.Repeat("y", 10000)
	var wg sync.WaitGroup
	for g := range 6 {
		a := a1
		if g%2 == 1 {
			a = a2
		}
		wg.Go(func() {
			for i := range 40 {
				if err := a.Append(&engine.Message{Key: "k", Payload: []byte(fmt.Sprintf("%d-%d-%s", g, i, big))}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 240 {
		t.Fatalf("%d lines, want 240", len(lines))
	}
	for i, l := range lines {
		if _, err := DecodeRecord([]byte(l)); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
	}
}
