// Package cli is flowrun's command line. It is importable so that a custom binary with its own
// compiled Go handlers, or transports, is a main of a few lines:
//
//	package main
//
//	import (
//		"github.com/flowrun/flowrun/cli"
//		_ "example.com/payouts/handlers" // registers its handlers in init
//	)
//
//	func main() { cli.Main() }
//
// It imports the built-in handlers (plugins) and transports (transports/builtin) itself, and
// reaches sources, emits, inspect rows and dead letters only through the transports registry.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/flowrun/flowrun/internal/handlers"
	_ "github.com/flowrun/flowrun/plugins"            // the built-in handlers: log, http and exec
	_ "github.com/flowrun/flowrun/transports/builtin" // the built-in sources and emits
)

// Version and Commit are set at build time with -ldflags "-X github.com/flowrun/flowrun/cli.Version=…".
var (
	Version = "dev"
	Commit  = ""
)

// Exit codes (SPEC §1).
const (
	ExitOK      = 0
	ExitConfig  = 1 // invalid configuration, nothing started; also a failed fmt -check or test
	ExitRuntime = 2 // a runtime failure; Redis unreachable for inspect and dlq
)

// Stdio is the process's standard streams, passed explicitly so that tests can run commands.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
}

// Main runs the command line with the process's arguments and exits. A stop signal (SIGINT,
// SIGTERM) cancels the command's context.
func Main() {
	if os.Getenv("GOGC") == "" {
		// The live heap is small and bounded (at most concurrency + batch messages per
		// pipeline), so collecting less often costs little memory and buys a third more
		// throughput on a busy stream. GOGC set in the environment wins.
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}

const usage = `flowrun: a declarative workflow engine.

Usage:
  flowrun run [flags] [PATH...]        load, validate and run pipelines
  flowrun validate [PATH...]           check configuration without connecting anywhere
  flowrun fmt [-check] [PATH...]       rewrite files in canonical HCL layout
  flowrun test [PATH...]               run the test blocks of the files
  flowrun inspect [PATH...]            per pipeline: backlog, lag, pending, delayed, dead letters
  flowrun dlq list|redrive PIPELINE [--limit N] [PATH...]
                                       show dead letters, or move them back to the source
  flowrun plugins                      list the compiled-in Go handlers
  flowrun version                      print version information

PATH is an .hcl file or a folder whose .hcl files are read in name order; default ".".
Run 'flowrun run -h' for run's flags.
`

// Run runs one command and returns its exit code.
func Run(ctx context.Context, args []string, stdio Stdio) int {
	if len(args) == 0 {
		fmt.Fprint(stdio.Err, usage)
		return ExitConfig
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, stdio)
	case "validate":
		return cmdValidate(rest, stdio)
	case "fmt":
		return cmdFmt(rest, stdio)
	case "test":
		return cmdTest(ctx, rest, stdio)
	case "inspect":
		return cmdInspect(ctx, rest, stdio)
	case "dlq":
		return cmdDLQ(ctx, rest, stdio)
	case "plugins":
		return cmdPlugins(stdio)
	case "version":
		return cmdVersion(stdio)
	case "help", "-h", "--help":
		fmt.Fprint(stdio.Out, usage)
		return ExitOK
	}
	fmt.Fprintf(stdio.Err, "flowrun: unknown command %q\n\n%s", cmd, usage)
	return ExitConfig
}

// parseArgs parses flags that may stand before, between or after the paths; no path means ".".
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	paths, err := positionals(fs, args)
	if err == nil && len(paths) == 0 {
		paths = []string{"."}
	}
	return paths, err
}

// positionals parses fs's flags wherever they stand among args and returns the other arguments.
func positionals(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlagSet(name string, stdio Stdio) *flag.FlagSet {
	fs := flag.NewFlagSet("flowrun "+name, flag.ContinueOnError)
	fs.SetOutput(stdio.Err)
	return fs
}

// flagExit maps a flag parsing error to an exit code: -h is not a failure.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	return ExitConfig
}

func cmdPlugins(stdio Stdio) int {
	for _, name := range handlers.Names() {
		p, _ := handlers.Lookup(name)
		fmt.Fprintf(stdio.Out, "%-10s %s\n", name, p.Doc)
	}
	return ExitOK
}

func cmdVersion(stdio Stdio) int {
	commit := Commit
	if commit == "" {
		commit = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					commit = s.Value
				}
			}
		}
	}
	fmt.Fprintf(stdio.Out, "flowrun %s\ngo %s\ncommit %s\n", Version, strings.TrimPrefix(runtime.Version(), "go"), commit)
	return ExitOK
}
