package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/flowrun/flowrun/engine"
)

// The progress bar of a file replay (SPEC §10 "Progress"): with console logs on a terminal, one
// line on stderr, redrawn in place with \r, that log lines push down rather than break.

// barEvery is how often the bar is redrawn.
const barEvery = 200 * time.Millisecond

// progressSource is a source that can tell how far a finite read has come: the file source in
// a replay (not when following, where ok is false).
type progressSource interface {
	Progress() (read, size int64, ok bool)
}

// wantBar decides whether run draws the bar: console logs (format as resolved) on a terminal.
func wantBar(format string, stderr io.Writer) bool {
	f, ok := stderr.(*os.File)
	return format == "console" && ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// progressBar writes log lines and the bar to a terminal. A log line clears the bar, is
// written, and the bar is drawn again under it.
type progressBar struct {
	mu   sync.Mutex
	out  io.Writer
	line string // the bar drawn now; "" when none
}

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\x1b[K"

func (b *progressBar) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.line == "" {
		return b.out.Write(p)
	}
	buf := make([]byte, 0, len(clearLine)+len(p)+len(b.line))
	buf = append(append(append(buf, clearLine...), p...), b.line...)
	if _, err := b.out.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// show draws line as the bar ("" erases it).
func (b *progressBar) show(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if line == b.line {
		return
	}
	io.WriteString(b.out, clearLine+line)
	b.line = line
}

// barState is one replay's last reading, for its rate.
type barState struct {
	read int64
	at   time.Time
	rate float64 // bytes per second, smoothed
}

// run draws the bar of the first running replay every barEvery until ctx ends, then erases it.
func (b *progressBar) run(ctx context.Context, pipelines func() []*engine.Pipeline) {
	t := time.NewTicker(barEvery)
	defer t.Stop()
	states := map[*engine.Pipeline]*barState{}
	for {
		var line string
		replays := 0
		seen := map[*engine.Pipeline]bool{}
		for _, p := range pipelines() {
			ps, ok := p.Source.(progressSource)
			if !ok {
				continue
			}
			read, size, ok := ps.Progress()
			if !ok {
				continue
			}
			seen[p] = true
			now := time.Now()
			st := states[p]
			if st == nil {
				st = &barState{read: read, at: now}
				states[p] = st
			} else if dt := now.Sub(st.at).Seconds(); dt > 0 {
				r := float64(read-st.read) / dt
				if st.rate == 0 {
					st.rate = r
				} else {
					st.rate = 0.7*st.rate + 0.3*r // steady enough to read, quick enough to follow
				}
				st.read, st.at = read, now
			}
			if replays == 0 {
				line = renderBar(p.Name, read, size, st.rate)
			}
			replays++
		}
		for p := range states {
			if !seen[p] {
				delete(states, p)
			}
		}
		if replays > 1 {
			line += fmt.Sprintf("  (+%d more)", replays-1)
		}
		b.show(line)
		select {
		case <-ctx.Done():
			b.show("")
			return
		case <-t.C:
		}
	}
}

// barWidth is the number of cells of the bar itself.
const barWidth = 24

// renderBar is one bar line: name, the bar, the percentage, bytes read of the size, the rate
// and the time left ("--" while the rate is unknown).
//
//	orders [==========>             ]  45%  12.3 MiB / 27.0 MiB  4.1 MiB/s  4s left
func renderBar(name string, read, size int64, rate float64) string {
	frac := 1.0
	if size > 0 {
		frac = min(max(float64(read)/float64(size), 0), 1)
	}
	filled := int(frac * barWidth)
	var bar strings.Builder
	bar.WriteString(strings.Repeat("=", filled))
	if filled < barWidth {
		bar.WriteString(">")
		bar.WriteString(strings.Repeat(" ", barWidth-filled-1))
	}
	left := "--"
	if rate > 0 {
		left = fmtSeconds(float64(max(size-read, 0)) / rate)
	}
	return fmt.Sprintf("%s [%s] %3d%%  %s / %s  %s/s  %s left",
		name, bar.String(), int(frac*100), fmtBytes(float64(read)), fmtBytes(float64(size)), fmtBytes(rate), left)
}

// fmtBytes writes n bytes in binary units, one decimal above bytes.
func fmtBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", int64(n))
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

// fmtSeconds rounds to seconds: 4s, 2m05s, 1h02m; beyond 99 hours, ">99h".
func fmtSeconds(f float64) string {
	if f >= 100*3600 {
		return ">99h"
	}
	s := int64(f + 0.5)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}
