package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// profileEnv names the file the profiling build writes its CPU profile to.
const profileEnv = "FLOWRUN_BENCH_CPUPROFILE"

// profileSource is added to package main of ./cmd/flowrun, through a build overlay (nothing is
// written into the repository), when -cpuprofile is set: with profileEnv set it profiles from
// start until SIGUSR1, then writes "<file>.done".
const profileSource = `package main

import (
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func init() {
	path := os.Getenv("` + profileEnv + `")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		panic(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		panic(err)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	go func() {
		<-c
		pprof.StopCPUProfile()
		f.Close()
		os.WriteFile(path+".done", nil, 0o644)
	}()
}
`

// buildFlowrun builds ./cmd/flowrun of the module this command runs in, into dir; with
// profiling, the binary also carries profileSource.
func buildFlowrun(dir string, profiling bool) (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" || root == filepath.Dir(os.DevNull) {
		return "", errors.New("run this command inside the flowrun module (go run ./e2e/bench)")
	}
	bin := filepath.Join(dir, "flowrun")
	args := []string{"build", "-o", bin}
	if profiling {
		src := filepath.Join(dir, "benchprofile.go")
		if err := os.WriteFile(src, []byte(profileSource), 0o644); err != nil {
			return "", err
		}
		overlay, _ := json.Marshal(map[string]map[string]string{
			"Replace": {filepath.Join(root, "cmd", "flowrun", "zz_benchprofile.go"): src},
		})
		ov := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ov, overlay, 0o644); err != nil {
			return "", err
		}
		args = append(args, "-overlay", ov)
	}
	build := exec.Command("go", append(args, "./cmd/flowrun")...)
	build.Dir = root
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build flowrun: %w", err)
	}
	return bin, nil
}

// flowrunProc is one running flowrun.
type flowrunProc struct {
	name    string
	cmd     *exec.Cmd
	log     string // stderr of the process
	profile string // CPU profile path, "" without
	// ctx ends when the process exits; its cause says how, with the tail of its log.
	ctx    context.Context
	exited chan struct{}
	err    error // cmd.Wait's result, once exited is closed
}

// startFlowrun writes cfg to <dir>/<name>.hcl and runs it, logging at warn to <dir>/<name>.log,
// its stdout to stdout (nil: discarded).
func (b *bench) startFlowrun(name, cfg string, stdout io.Writer) (*flowrunProc, error) {
	path := filepath.Join(b.dir, name+".hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	p := &flowrunProc{name: name, log: filepath.Join(b.dir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(b.bin, "run", "--log-level", "warn", path)
	p.cmd.Stderr = logf
	p.cmd.Stdout = stdout
	p.cmd.Env = os.Environ()
	if b.o.cpuprofile != "" {
		p.profile = filepath.Join(b.o.cpuprofile, name+".pprof")
		os.Remove(p.profile + ".done")
		p.cmd.Env = append(p.cmd.Env, profileEnv+"="+p.profile)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start flowrun: %w", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	p.ctx = ctx
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
		cancel(fmt.Errorf("flowrun exited early (%v); its log ends:\n%s", p.err, p.tail()))
	}()
	return p, nil
}

// stop reads flowrun's peak RSS, finishes its CPU profile, stops it with SIGTERM as an operator
// would and returns the peak RSS in KiB. A flowrun that does not exit 0 is an error.
func (p *flowrunProc) stop() (int64, error) {
	rss := peakRSS(p.cmd.Process.Pid)
	if p.profile != "" {
		p.cmd.Process.Signal(syscall.SIGUSR1)
		waitFile(p.profile+".done", 10*time.Second)
		os.Remove(p.profile + ".done")
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		return rss, fmt.Errorf("flowrun did not stop within 30s of SIGTERM; its log ends:\n%s", p.tail())
	}
	if p.err != nil {
		return rss, fmt.Errorf("flowrun exited with %v; its log ends:\n%s", p.err, p.tail())
	}
	if p.profile != "" {
		fmt.Printf("%-17s flowrun CPU profile: %s\n", p.name, p.profile)
	}
	return rss, nil
}

// kill ends a flowrun whose run failed; stop is the normal way.
func (p *flowrunProc) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// tail is the end of flowrun's log.
func (p *flowrunProc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "(empty)"
	}
	return string(b)
}

func waitFile(path string, timeout time.Duration) {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
}

// peakRSS reads VmHWM (KiB) from /proc; 0 where it cannot.
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// concurrencyLine is the pipeline attribute for -concurrency, or nothing for flowrun's default.
func (b *bench) concurrencyLine() string {
	if b.o.concurrency > 0 {
		return fmt.Sprintf("  concurrency = %d\n", b.o.concurrency)
	}
	return ""
}

// redisBlock is the config's one redis block.
func (b *bench) redisBlock() string {
	s := fmt.Sprintf("redis \"bench\" {\n  url = %q\n}\n\n", b.srv.URL)
	if b.collector != "" {
		s += fmt.Sprintf("telemetry {\n  otlp_endpoint = %q\n  sample_ratio  = 1\n}\n\n", b.collector)
	}
	return s
}
