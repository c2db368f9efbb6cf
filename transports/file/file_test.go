package file

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/transporttest"
)

func init() { pollInterval = 5 * time.Millisecond }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func open(t *testing.T, opts Options) (*Source, *transporttest.Logs) {
	t.Helper()
	var logs transporttest.Logs
	s, err := New(opts, zerolog.New(&logs))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &logs
}

// drain receives every delivery of a finite source until Receive returns nil.
func drain(t *testing.T, s *Source) []*engine.Delivery {
	t.Helper()
	return transporttest.Receive(t, s, 1).Drain(t)
}

func ids(ds []*engine.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

const sample = `{"key":"a","headers":{"h":"1"},"payload":{"n":1}}
{"key":"b","payload":"two"}

{"key":"a","payload":"three"}
not json
{"key":"a","payload":4}
`

func TestReplay(t *testing.T) {
	tests := []struct {
		name     string
		key      string
		ids      []string
		keys     []string
		payloads []string
	}{
		{"every key", "", []string{"1", "2", "4", "6"}, []string{"a", "b", "a", "a"}, []string{`{"n":1}`, "two", "three", "4"}},
		{"key filter", "a", []string{"1", "4", "6"}, []string{"a", "a", "a"}, []string{`{"n":1}`, "three", "4"}},
		{"no match", "zzz", []string{}, []string{}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in.jsonl")
			writeFile(t, path, sample)
			s, _ := open(t, Options{Path: path, Key: tt.key})
			if c := s.Capabilities(); c != (engine.Capabilities{}) {
				t.Errorf("Capabilities = %+v", c)
			}
			got := drain(t, s)
			if g := ids(got); !slices.Equal(g, tt.ids) {
				t.Fatalf("ids = %v, want %v", g, tt.ids)
			}
			for i, d := range got {
				if d.Key != tt.keys[i] || string(d.Payload) != tt.payloads[i] || d.Headers == nil {
					t.Errorf("delivery %s = %s %q %v", d.ID, d.Key, d.Payload, d.Headers)
				}
			}
			if len(got) > 0 && !maps.Equal(got[0].Headers, map[string]string{"h": "1"}) {
				t.Errorf("headers = %v", got[0].Headers)
			}
			if s.Malformed() != 1 {
				t.Errorf("Malformed = %d, want 1", s.Malformed())
			}
		})
	}
}

func TestMalformedLinesLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, `{"key":"a","payload":1}
{"key":"a","payload":
[1,2]
{"key":7}
{"key":"a","headers":{"n":[1]}}
{"key":"a","payload":6}
`)
	s, logs := open(t, Options{Path: path})
	got := drain(t, s)
	if g := ids(got); !slices.Equal(g, []string{"1", "6"}) {
		t.Fatalf("ids = %v, want [1 6]", g)
	}
	want := map[float64]string{
		2: "malformed record: not JSON",
		3: "malformed record: not a JSON object",
		4: "malformed record: key is not a string",
		5: "malformed record: headers are not an object of strings, numbers and booleans",
	}
	seen := map[float64]string{}
	for _, e := range logs.Entries(t) {
		if e["level"] != "warn" {
			continue
		}
		if e["message"] != "malformed record skipped" || e["path"] != path {
			t.Errorf("log entry %v", e)
		}
		seen[e["line"].(float64)] = e["error"].(string)
	}
	if !maps.Equal(seen, want) {
		t.Fatalf("logged %v, want %v", seen, want)
	}
	if s.Malformed() != 4 {
		t.Errorf("Malformed = %d, want 4", s.Malformed())
	}
}

func TestLastLineWithoutNewline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, `{"key":"a","payload":1}`+"\n"+`{"key":"a","payload":2}`)
	s, _ := open(t, Options{Path: path})
	got := drain(t, s)
	if g := ids(got); !slices.Equal(g, []string{"1", "2"}) || string(got[1].Payload) != "2" {
		t.Fatalf("ids = %v", g)
	}
	// A copy appended now starts on a line of its own.
	if err := s.Requeue(context.Background(), []*engine.Message{{Key: "a", Payload: []byte("3")}}); err != nil {
		t.Fatal(err)
	}
	want := `{"key":"a","payload":1}` + "\n" + `{"key":"a","payload":2}` + "\n" + `{"key":"a","payload":3}` + "\n"
	if got := readFile(t, path); got != want {
		t.Fatalf("file =\n%s\nwant\n%s", got, want)
	}
}

func TestMissingFile(t *testing.T) {
	_, err := New(Options{Path: filepath.Join(t.TempDir(), "nope.jsonl")}, zerolog.Nop())
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want ErrNotExist", err)
	}
}

// fileOffset reads the read handle's offset (kernel state, safe while Receive reads).
func fileOffset(t *testing.T, s *Source) int64 {
	off, err := s.f.Seek(0, io.SeekCurrent)
	if err != nil {
		t.Fatal(err)
	}
	return off
}

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, `{"key":"a","payload":1}`+"\n")
	s, _ := open(t, Options{Path: path, Follow: true})
	r := transporttest.Receive(t, s, 1)
	if d := r.Next(t); d.ID != "1" {
		t.Fatalf("first id %s", d.ID)
	}

	appendFile(t, path, `{"key":"a","payload":2}`+"\n"+`{"key":"b","payload":3}`+"\n")
	for _, want := range []string{"2", "3"} {
		if d := r.Next(t); d.ID != want || string(d.Payload) != want {
			t.Fatalf("got id %s payload %s, want %s", d.ID, d.Payload, want)
		}
	}

	// A line written in two parts is read once, whole.
	first := `{"key":"a","payload":{"half":`
	appendFile(t, path, first)
	size := int64(len(readFile(t, path)))
	transporttest.WaitFor(t, "the reader to reach the unfinished line", func() bool { return fileOffset(t, s) == size })
	appendFile(t, path, `"done"}}`+"\n")
	d := r.Next(t)
	if d.ID != "4" || string(d.Payload) != `{"half":"done"}` {
		t.Fatalf("got id %s payload %s", d.ID, d.Payload)
	}
	if s.Malformed() != 0 {
		t.Fatalf("Malformed = %d, want 0", s.Malformed())
	}

	r.Stop(t)
	if err := r.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive = %v, want context.Canceled", err)
	}
}

// A copy appended while the replay has not reached the end of the file is read in this replay.
func TestCopyAppendedBeforeEOFIsRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	var lines strings.Builder
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&lines, `{"key":"k","payload":%d}`+"\n", i)
	}
	writeFile(t, path, lines.String())
	s, _ := open(t, Options{Path: path})
	r := transporttest.Receive(t, s, 1)
	d1 := r.Next(t)
	d1.Attempt = 1
	// The reader holds a line or two ahead at most (handed over, not yet taken), far from the
	// end of the file.
	if err := s.Settle(context.Background(), []engine.Settlement{{Delivery: d1, Action: engine.ActRequeue, Copy: d1.RetryCopy()}}); err != nil {
		t.Fatal(err)
	}
	var got []*engine.Delivery
	for range 6 {
		got = append(got, r.Next(t))
	}
	if err := r.End(t); err != nil {
		t.Fatalf("Receive = %v", err)
	}
	if g := ids(got); !slices.Equal(g, []string{"2", "3", "4", "5", "6", "7"}) {
		t.Fatalf("ids = %v, want [2 3 4 5 6 7]", g)
	}
	if c := got[5]; string(c.Payload) != "1" || c.Headers[engine.HeaderRetryCount] != "1" {
		t.Fatalf("copy = %q %v", c.Payload, c.Headers)
	}
}

func readCheckpoint(t *testing.T, path string) string {
	t.Helper()
	return strings.TrimSpace(readFile(t, path))
}

func TestCheckpointOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "in.checkpoint")
	lines := []string{
		`{"key":"k","payload":1}`, // line 1, bytes 0-24
		`{"key":"k","payload":2}`, // line 2, 24-48
		`{"key":"x","payload":0}`, // line 3, other key
		`{"key":"k","payload":4}`, // line 4, 72-96
		`garbage`,                 // line 5
		`{"key":"k","payload":6}`, // line 6, 104-128
		`{"key":"k","payload":7}`, // line 7, 128-152
	}
	writeFile(t, path, strings.Join(lines, "\n")+"\n")
	opts := Options{Path: path, Key: "k", Checkpoint: cpPath}
	ctx := context.Background()

	s1, _ := open(t, opts)
	got := drain(t, s1)
	if g := ids(got); !slices.Equal(g, []string{"1", "2", "4", "6", "7"}) {
		t.Fatalf("ids = %v", g)
	}
	byID := map[string]*engine.Delivery{}
	for _, d := range got {
		byID[d.ID] = d
	}
	ack := func(s *Source, ids ...string) {
		t.Helper()
		var b []engine.Settlement
		for _, id := range ids {
			b = append(b, engine.Settlement{Delivery: byID[id], Action: engine.ActAck})
		}
		if err := s.Settle(ctx, b); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		ack  []string
		want string
	}{
		{[]string{"4", "2"}, `{"offset":0,"line":0,"settled":[[2,4]]}`},
		{[]string{"7"}, `{"offset":0,"line":0,"settled":[[2,4],[7,7]]}`},
		{[]string{"1"}, `{"offset":104,"line":5,"settled":[[7,7]]}`},
	}
	for _, st := range steps {
		ack(s1, st.ack...)
		if g := readCheckpoint(t, cpPath); g != st.want {
			t.Fatalf("after acking %v checkpoint = %s, want %s", st.ack, g, st.want)
		}
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	// A restart that stops before reading anything keeps what it was told.
	s2, _ := open(t, opts)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if g := readCheckpoint(t, cpPath); g != steps[2].want {
		t.Fatalf("checkpoint after an idle restart = %s", g)
	}

	// A restart delivers only the unsettled record 6, with its line number, not 7.
	s3, _ := open(t, opts)
	got = drain(t, s3)
	if g := ids(got); !slices.Equal(g, []string{"6"}) || string(got[0].Payload) != "6" {
		t.Fatalf("after restart ids = %v", g)
	}
	// Closed with 6 still in flight: 7 stays listed as settled.
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	if g := readCheckpoint(t, cpPath); g != `{"offset":104,"line":5,"settled":[[7,7]]}` {
		t.Fatalf("checkpoint = %s", g)
	}

	s4, _ := open(t, opts)
	got = drain(t, s4)
	if g := ids(got); !slices.Equal(g, []string{"6"}) {
		t.Fatalf("ids = %v", g)
	}
	byID["6"] = got[0]
	ack(s4, "6")
	if g := readCheckpoint(t, cpPath); g != `{"offset":152,"line":7}` {
		t.Fatalf("checkpoint = %s", g)
	}
	s4.Close()

	// New records after the end are numbered on from the checkpoint.
	appendFile(t, path, `{"key":"k","payload":8}`+"\n")
	s5, _ := open(t, opts)
	got = drain(t, s5)
	if g := ids(got); !slices.Equal(g, []string{"8"}) {
		t.Fatalf("ids = %v", g)
	}
}

// Records interrupted mid-replay: the one never handed over is not counted as settled.
func TestCheckpointCancelledReplay(t *testing.T) {
	dir := t.TempDir()
	path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "cp")
	writeFile(t, path, `{"key":"k","payload":1}`+"\n"+`{"key":"k","payload":2}`+"\n"+`{"key":"k","payload":3}`+"\n")
	opts := Options{Path: path, Checkpoint: cpPath}
	s1, _ := open(t, opts)
	r := transporttest.Receive(t, s1, 1)
	d1 := r.Next(t)
	r.Stop(t)
	if err := r.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive = %v", err)
	}
	if err := s1.Settle(context.Background(), []engine.Settlement{{Delivery: d1, Action: engine.ActAck}}); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	if g := readCheckpoint(t, cpPath); g != `{"offset":24,"line":1}` {
		t.Fatalf("checkpoint = %s", g)
	}
	s2, _ := open(t, opts)
	if g := ids(drain(t, s2)); !slices.Equal(g, []string{"2", "3"}) {
		t.Fatalf("ids = %v", g)
	}
}

// Copies appended after a last line without a newline keep their line numbers across a restart.
func TestCheckpointAfterLineWithoutNewline(t *testing.T) {
	dir := t.TempDir()
	path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "cp")
	writeFile(t, path, `{"key":"k","payload":1}`)
	opts := Options{Path: path, Checkpoint: cpPath}
	s1, _ := open(t, opts)
	got := drain(t, s1)
	got[0].Attempt = 1
	if err := s1.Settle(context.Background(), []engine.Settlement{{Delivery: got[0], Action: engine.ActRequeue, Copy: got[0].RetryCopy()}}); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	if g := readCheckpoint(t, cpPath); g != `{"offset":23,"line":1}` {
		t.Fatalf("checkpoint = %s", g)
	}
	s2, _ := open(t, opts)
	got = drain(t, s2)
	if g := ids(got); !slices.Equal(g, []string{"2"}) || got[0].Headers[engine.HeaderRetryCount] != "1" {
		t.Fatalf("ids = %v", g)
	}
}

func TestCheckpointRejected(t *testing.T) {
	tests := []struct {
		name, checkpoint, want string
	}{
		{"beyond the end", `{"offset":999,"line":3}`, "truncated or replaced"},
		{"inside a line", `{"offset":5,"line":0}`, "line boundary"},
		{"not json", `12 x`, "is not"},
		{"negative", `{"offset":-1,"line":0}`, "is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "cp")
			writeFile(t, path, `{"key":"k","payload":1}`+"\n"+`{"key":"k","payload":2}`+"\n")
			writeFile(t, cpPath, tt.checkpoint)
			_, err := New(Options{Path: path, Checkpoint: cpPath}, zerolog.Nop())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// Every read of the checkpoint, at any moment, finds a whole one; no temporary file is left.
func TestCheckpointAtomic(t *testing.T) {
	dir := t.TempDir()
	path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "cp")
	var sb strings.Builder
	const n = 300
	for range n {
		sb.WriteString(`{"key":"k","payload":"` + strings.Repeat("p", 50) + `"}` + "\n")
	}
	writeFile(t, path, sb.String())
	s, _ := open(t, Options{Path: path, Checkpoint: cpPath})
	got := drain(t, s)

	stop := make(chan struct{})
	readerDone := make(chan error)
	go func() {
		reads := 0
		for {
			select {
			case <-stop:
				if reads == 0 {
					readerDone <- errors.New("checkpoint never read")
				}
				readerDone <- nil
				return
			default:
			}
			b, err := os.ReadFile(cpPath)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			var cp checkpoint
			if err == nil {
				err = json.Unmarshal(b, &cp)
			}
			if err != nil {
				readerDone <- err
				return
			}
			reads++
		}
	}()
	for i := range got { // one batch per record, in reverse: many distinct checkpoints
		d := got[len(got)-1-i]
		if err := s.Settle(context.Background(), []engine.Settlement{{Delivery: d, Action: engine.ActAck}}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-readerDone; err != nil {
		t.Fatalf("reader: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"cp", "in.jsonl"}) {
		t.Fatalf("folder holds %v", names)
	}
	st, err := os.Stat(cpPath)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("checkpoint mode %v, %v", st.Mode(), err)
	}
	if g := readCheckpoint(t, cpPath); g != `{"offset":22500,"line":300}` {
		t.Fatalf("checkpoint = %s", g)
	}
}

// A followed file's checkpoint moves over skipped lines while idle.
func TestFollowCheckpointIdle(t *testing.T) {
	dir := t.TempDir()
	path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "cp")
	writeFile(t, path, `{"key":"other","payload":1}`+"\n"+`{"key":"other","payload":2}`+"\n")
	s, _ := open(t, Options{Path: path, Key: "k", Follow: true, Checkpoint: cpPath})
	r := transporttest.Receive(t, s, 1)
	transporttest.WaitFor(t, "an idle checkpoint", func() bool {
		b, _ := os.ReadFile(cpPath)
		return strings.TrimSpace(string(b)) == `{"offset":56,"line":2}`
	})
	r.Stop(t)
	if err := r.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive = %v", err)
	}
}

// A checkpoint that cannot be saved is reported per delivery; the batch sent again (as the
// engine does) saves it and appends nothing a second time.
func TestSettleCheckpointFailureResendWritesOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	cpDir := filepath.Join(dir, "state")
	if err := os.Mkdir(cpDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cpPath := filepath.Join(cpDir, "in.checkpoint")
	orig := `{"key":"k","payload":1}` + "\n" + `{"key":"k","payload":2}` + "\n" + `{"key":"k","payload":3}` + "\n"
	writeFile(t, path, orig)
	s, _ := open(t, Options{Path: path, Checkpoint: cpPath})
	got := drain(t, s)
	if len(got) != 3 {
		t.Fatalf("%d deliveries", len(got))
	}
	for _, d := range got {
		d.Attempt = 1
	}
	dead := got[1].Message.Clone()
	dead.Headers[engine.HeaderDeadLetterReason] = "boom"
	batch := []engine.Settlement{
		{Delivery: got[0], Action: engine.ActRequeue, Copy: got[0].RetryCopy()},
		{Delivery: got[1], Action: engine.ActDeadLetter, Copy: dead, DeadLetterKey: "k.dlq"},
		{Delivery: got[2], Action: engine.ActAck},
	}

	// The checkpoint's folder is gone for a moment (a read-only folder would not stop root).
	if err := os.Rename(cpDir, cpDir+".away"); err != nil {
		t.Fatal(err)
	}
	fs := transporttest.Faults(t, s.Settle(context.Background(), batch))
	if len(fs) != 3 {
		t.Fatalf("faults = %+v, want one per delivery", fs)
	}
	for i, f := range fs {
		if f.Index != i || f.Command != "checkpoint" || f.Key != cpPath || f.Reason != "not_found" || !f.Permanent || !errors.Is(f.Err, os.ErrNotExist) {
			t.Errorf("fault %d = %+v", i, f)
		}
	}
	want := orig +
		`{"key":"k","headers":{"x-retry-count":"1"},"payload":1}` + "\n" +
		`{"key":"k.dlq","headers":{"x-dead-letter-reason":"boom"},"payload":2}` + "\n"
	if g := readFile(t, path); g != want {
		t.Fatalf("after the failed save, file =\n%s\nwant\n%s", g, want)
	}

	if err := os.Rename(cpDir+".away", cpDir); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the resend, and once more for good measure
		if err := s.Settle(context.Background(), batch); err != nil {
			t.Fatalf("resend: %v", err)
		}
	}
	if g := readFile(t, path); g != want {
		t.Fatalf("after the resend, file =\n%s\nwant each copy once:\n%s", g, want)
	}
	if g, w := readCheckpoint(t, cpPath), fmt.Sprintf(`{"offset":%d,"line":3}`, len(orig)); g != w {
		t.Fatalf("checkpoint = %s, want %s", g, w)
	}
}

// A transient failure to save the checkpoint (a full disk) is a transient fault; the resend
// saves it and appends nothing again.
func TestSettleCheckpointTransient(t *testing.T) {
	dir := t.TempDir()
	path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "in.checkpoint")
	writeFile(t, path, `{"key":"k","payload":1}`+"\n")
	s, _ := open(t, Options{Path: path, Checkpoint: cpPath})
	got := drain(t, s)
	got[0].Attempt = 1
	batch := []engine.Settlement{{Delivery: got[0], Action: engine.ActRequeue, Copy: got[0].RetryCopy()}}

	full := &os.PathError{Op: "write", Path: cpPath, Err: syscall.ENOSPC}
	writeCheckpoint = func(string, []byte) error { return full }
	f := transporttest.OnlyFault(t, s.Settle(context.Background(), batch))
	writeCheckpoint = writeFileAtomic
	if f.Command != "checkpoint" || f.Reason != "no_space" || f.Permanent {
		t.Fatalf("fault = %+v, want a transient no_space checkpoint fault", f)
	}
	if err := s.Settle(context.Background(), batch); err != nil {
		t.Fatalf("resend: %v", err)
	}
	if n := strings.Count(readFile(t, path), `"x-retry-count":"1"`); n != 1 {
		t.Fatalf("%d copies in the file, want 1", n)
	}
}

// A write cut short by a full disk: the copies written whole count, the others are resent.
func TestSettlePartialAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	orig := `{"key":"k","payload":1}` + "\n" + `{"key":"k","payload":2}` + "\n" + `{"key":"k","payload":3}` + "\n"
	writeFile(t, path, orig)
	s, _ := open(t, Options{Path: path})
	got := drain(t, s)
	var batch []engine.Settlement
	for _, d := range got {
		d.Attempt = 1
		batch = append(batch, engine.Settlement{Delivery: d, Action: engine.ActRequeue, Copy: d.RetryCopy()})
	}
	copyLine := func(n int) string {
		return fmt.Sprintf(`{"key":"k","headers":{"x-retry-count":"1"},"payload":%d}`+"\n", n)
	}

	// The first copy and half of the second reach the file, then the disk is full.
	limit := len(copyLine(1)) + 10
	appendWrite = func(f *os.File, b []byte) (int, error) {
		n, _ := f.Write(b[:limit])
		return n, &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
	}
	fs := transporttest.Faults(t, s.Settle(context.Background(), batch))
	appendWrite = (*os.File).Write
	if len(fs) != 2 || fs[0].Index != 1 || fs[1].Index != 2 {
		t.Fatalf("faults = %+v, want deliveries 1 and 2", fs)
	}
	for _, f := range fs {
		if f.Command != "append" || f.Reason != "no_space" || f.Permanent {
			t.Fatalf("fault = %+v, want a transient append fault", f)
		}
	}
	if err := s.Settle(context.Background(), batch); err != nil { // the engine's resend
		t.Fatalf("resend: %v", err)
	}
	// The cut-off copy stays a malformed line of its own; every copy is whole exactly once.
	want := orig + copyLine(1) + copyLine(2)[:10] + "\n" + copyLine(2) + copyLine(3)
	if g := readFile(t, path); g != want {
		t.Fatalf("file =\n%s\nwant\n%s", g, want)
	}
}

// Requeue reports the copies it did not write whole, by index.
func TestRequeuePartial(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, "")
	s, _ := open(t, Options{Path: path})
	msgs := []*engine.Message{{Key: "a", Payload: []byte("1")}, {Key: "b", Payload: []byte("2")}}
	appendWrite = func(f *os.File, b []byte) (int, error) {
		n, _ := f.Write(b[:len(`{"key":"a","payload":1}`+"\n")])
		return n, &os.PathError{Op: "write", Path: path, Err: syscall.EIO}
	}
	err := s.Requeue(context.Background(), msgs)
	appendWrite = (*os.File).Write
	f := transporttest.OnlyFault(t, err)
	if f.Index != 1 || f.Reason != "io" || f.Permanent {
		t.Fatalf("fault = %+v", f)
	}
}

// A failed fsync is permanent: the delivery is never settled in this process, so the checkpoint
// stays before it, and a resend does not append its copy again.
func TestSettleFsyncFailure(t *testing.T) {
	dir := t.TempDir()
	path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "in.checkpoint")
	writeFile(t, path, `{"key":"k","payload":1}`+"\n"+`{"key":"k","payload":2}`+"\n")
	s, _ := open(t, Options{Path: path, Checkpoint: cpPath})
	got := drain(t, s)
	got[0].Attempt = 1
	batch := []engine.Settlement{
		{Delivery: got[0], Action: engine.ActRequeue, Copy: got[0].RetryCopy()},
		{Delivery: got[1], Action: engine.ActAck},
	}
	appendSync = func(*os.File) error { return &os.PathError{Op: "sync", Path: path, Err: syscall.EIO} }
	f := transporttest.OnlyFault(t, s.Settle(context.Background(), batch))
	appendSync = (*os.File).Sync
	if f.Index != 0 || f.Command != "fsync" || f.Reason != "fsync" || !f.Permanent {
		t.Fatalf("fault = %+v", f)
	}
	f = transporttest.OnlyFault(t, s.Settle(context.Background(), batch[:1]))
	if f.Command != "fsync" {
		t.Fatalf("resend: fault = %+v", f)
	}
	if n := strings.Count(readFile(t, path), `"x-retry-count":"1"`); n != 1 {
		t.Fatalf("%d copies, want 1", n)
	}
	// Line 2 is settled, line 1 is not: the checkpoint stays before line 1.
	if g := readCheckpoint(t, cpPath); g != `{"offset":0,"line":0,"settled":[[2,2]]}` {
		t.Fatalf("checkpoint = %s", g)
	}
}

// With no key, the source reads every key but the pipeline's dead letter (SPEC §2).
func TestDeadLetterKeyNeverRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, `{"key":"a","payload":1}`+"\n"+`{"key":"dlq","payload":2}`+"\n"+`{"key":"b","payload":3}`+"\n")
	for _, key := range []string{"", "a"} {
		s, _ := open(t, Options{Path: path, Key: key, DeadLetter: "dlq"})
		got := drain(t, s)
		for _, d := range got {
			if d.Key == "dlq" {
				t.Fatalf("key %q: delivered dead letter at line %s", key, d.ID)
			}
		}
		if key == "" && !slices.Equal(ids(got), []string{"1", "3"}) {
			t.Fatalf("ids = %v, want [1 3]", ids(got))
		}
	}
}

// Through the engine: a checkpoint save that fails once makes the engine send the batch again,
// and each copy and dead letter is in the file once.
func TestEngineResendAfterCheckpointFailure(t *testing.T) {
	dir := t.TempDir()
	path, cpPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "in.checkpoint")
	writeFile(t, path, `{"key":"k","payload":"retry"}`+"\n"+`{"key":"k","payload":"dead"}`+"\n"+`{"key":"k","payload":"ok"}`+"\n")
	s, _ := open(t, Options{Path: path, Checkpoint: cpPath, DeadLetter: "k.dlq"})

	var saves atomic.Int32
	writeCheckpoint = func(name string, data []byte) error {
		if saves.Add(1) <= 2 {
			return &os.PathError{Op: "write", Path: name, Err: syscall.ENOSPC}
		}
		return writeFileAtomic(name, data)
	}
	t.Cleanup(func() { writeCheckpoint = writeFileAtomic })

	h := engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
		switch {
		case string(d.Payload) == "retry" && d.Attempt == 1:
			return engine.Result{Outcome: engine.Retry()}
		case string(d.Payload) == "dead":
			return engine.Result{Outcome: engine.DeadLetter("no")}
		}
		return engine.Result{Outcome: engine.Ack()}
	})
	eng := engine.New(engine.Options{}, &engine.Pipeline{
		Name: "p", Source: s, Handler: h, Concurrency: 1, MaxAttempts: 3, DeadLetter: "k.dlq",
		ShutdownTimeout: 5 * time.Second, Logger: zerolog.Nop(),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if saves.Load() <= 2 {
		t.Fatalf("%d checkpoint saves: the failure was not retried", saves.Load())
	}
	data := readFile(t, path)
	if n := strings.Count(data, `"x-retry-count":"1"`); n != 1 {
		t.Errorf("%d retry copies, want 1:\n%s", n, data)
	}
	if n := strings.Count(data, `"key":"k.dlq"`); n != 1 {
		t.Errorf("%d dead letters, want 1:\n%s", n, data)
	}
	if n := strings.Count(data, "\n"); n != 5 {
		t.Errorf("%d lines, want 5:\n%s", n, data)
	}
}

// Progress is bytes read of the file's size for a replay (the progress bar, SPEC §10); a
// followed file has no end and reports none.
func TestProgress(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, sample)
	s, _ := open(t, Options{Path: path})
	if read, size, ok := s.Progress(); !ok || read != 0 || size != int64(len(sample)) {
		t.Fatalf("before reading: Progress = %d, %d, %v; want 0, %d, true", read, size, ok, len(sample))
	}
	drain(t, s)
	if read, size, ok := s.Progress(); !ok || read != size || size != int64(len(sample)) {
		t.Fatalf("at the end: Progress = %d, %d, %v; want %d of %d", read, size, ok, len(sample), len(sample))
	}
	f, _ := open(t, Options{Path: path, Follow: true})
	if _, _, ok := f.Progress(); ok {
		t.Fatal("a followed file reports progress")
	}
}
