package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/flowrun/flowrun/engine"
)

func TestRenderBar(t *testing.T) {
	tests := []struct {
		read, size int64
		rate       float64
		want       string
	}{
		{0, 2048, 0, "orders [>                       ]   0%  0 B / 2.0 KiB  0 B/s  -- left"},
		{1 << 20, 4 << 20, 512 << 10, "orders [======>                 ]  25%  1.0 MiB / 4.0 MiB  512.0 KiB/s  6s left"},
		{3 << 30, 4 << 30, 1 << 20, "orders [==================>     ]  75%  3.0 GiB / 4.0 GiB  1.0 MiB/s  17m04s left"},
		{500, 500, 100, "orders [========================] 100%  500 B / 500 B  100 B/s  0s left"},
		{3599, 7200, 1, "orders [===========>            ]  49%  3.5 KiB / 7.0 KiB  1 B/s  1h00m left"},
		{0, 0, 0, "orders [========================] 100%  0 B / 0 B  0 B/s  -- left"}, // an empty file
		{900, 800, 10, "orders [========================] 100%  900 B / 800 B  10 B/s  0s left"},
		{10, 100 << 30, 1, "orders [>                       ]   0%  10 B / 100.0 GiB  1 B/s  >99h left"},
	}
	for _, tt := range tests {
		if got := renderBar("orders", tt.read, tt.size, tt.rate); got != tt.want {
			t.Errorf("renderBar(%d, %d, %v)\n got %q\nwant %q", tt.read, tt.size, tt.rate, got, tt.want)
		}
	}
}

// A log line written while the bar shows clears it, and the bar is drawn again under the line.
func TestProgressBarKeepsLogLinesWhole(t *testing.T) {
	var out bytes.Buffer
	b := &progressBar{out: &out}
	b.Write([]byte("first\n"))
	b.show("BAR 1")
	b.Write([]byte("second\n"))
	b.show("BAR 2")
	b.show("BAR 2") // unchanged: not drawn again
	b.show("")
	want := "first\n" + clearLine + "BAR 1" + clearLine + "second\nBAR 1" + clearLine + "BAR 2" + clearLine
	if got := out.String(); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// The bar is drawn only for console logs on a terminal (a real pty here).
func TestWantBar(t *testing.T) {
	ptm, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptm.Close()
	defer tty.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, tt := range []struct {
		format string
		out    any
		want   bool
	}{
		{"console", tty, true},
		{"json", tty, false},
		{"console", w, false},
		{"console", &bytes.Buffer{}, false},
	} {
		var got bool
		switch o := tt.out.(type) {
		case *os.File:
			got = wantBar(tt.format, o)
		case *bytes.Buffer:
			got = wantBar(tt.format, o)
		}
		if got != tt.want {
			t.Errorf("wantBar(%s, %T %v) = %v", tt.format, tt.out, tt.out == any(tty), got)
		}
	}
	if got := resolveLogFormat(tty, ""); got != "console" {
		t.Errorf("default format on a terminal: %s", got)
	}
	if got := resolveLogFormat(w, ""); got != "json" {
		t.Errorf("default format on a pipe: %s", got)
	}
}

// fakeProgress is a source that reports progress; only Progress is called.
type fakeProgress struct {
	engine.Source
	mu         sync.Mutex
	read, size int64
	follow     bool
}

func (f *fakeProgress) Progress() (int64, int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.read, f.size, !f.follow
}

// run draws the first replay, says how many more there are, skips followed files, and erases
// the bar when it ends.
func TestProgressBarRun(t *testing.T) {
	var out syncBuf
	b := &progressBar{out: &out}
	ps := []*engine.Pipeline{
		{Name: "followed", Source: &fakeProgress{follow: true}},
		{Name: "a", Source: &fakeProgress{read: 10, size: 100}},
		{Name: "b", Source: &fakeProgress{read: 1, size: 2}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		b.run(ctx, func() []*engine.Pipeline { return ps })
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "(+1 more)") {
		if time.Now().After(deadline) {
			t.Fatalf("no bar drawn: %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	got := out.String()
	if !strings.HasPrefix(got, clearLine+"a [==>") || strings.Contains(got, "followed") || !strings.HasSuffix(got, clearLine) {
		t.Fatalf("bar output %q", got)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
