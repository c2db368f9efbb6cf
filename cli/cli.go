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

// Run runs one command and returns its exit code.
func Run(ctx context.Context, args []string, stdio Stdio) int {
	if len(args) == 0 {
		writeUsage(stdio.Err)
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
		if len(rest) > 0 && isHelpFlag(rest[0]) {
			writeDLQHelp(stdio)
			return ExitOK
		}
		return cmdDLQ(ctx, rest, stdio)
	case "runs":
		return cmdRuns(ctx, rest, stdio)
	case "graph":
		return cmdGraph(rest, stdio)
	case "plugins":
		return cmdPlugins(rest, stdio)
	case "version", "--version", "-version":
		return cmdVersion(rest, stdio)
	case "completion":
		return cmdCompletion(rest, stdio)
	case "help":
		return cmdHelp(ctx, rest, stdio)
	case "-h", "--help", "-help":
		writeUsage(stdio.Out)
		return ExitOK
	}
	unknownCommand(stdio.Err, cmd)
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
	setUsage(fs, name, stdio)
	return fs
}

// flagExit maps a flag parsing error to an exit code: -h is not a failure.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	return ExitConfig
}

func cmdPlugins(args []string, stdio Stdio) int {
	if code, ok := noArgs("plugins", args, stdio); !ok {
		return code
	}
	for _, name := range handlers.Names() {
		p, _ := handlers.Lookup(name)
		fmt.Fprintf(stdio.Out, "%-10s %s\n", name, p.Doc)
	}
	return ExitOK
}

func cmdVersion(args []string, stdio Stdio) int {
	if code, ok := noArgs("version", args, stdio); !ok {
		return code
	}
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

// noArgs parses the flags of a command that takes neither flags nor arguments; ok is false when
// the command should stop with code (after -h, or on a usage error).
func noArgs(name string, args []string, stdio Stdio) (code int, ok bool) {
	fs := newFlagSet(name, stdio)
	pos, err := positionals(fs, args)
	if err != nil {
		return flagExit(err), false
	}
	if len(pos) > 0 {
		fmt.Fprintf(stdio.Err, "flowrun %s: unexpected argument %q\nRun 'flowrun help %s' for usage.\n", name, pos[0], name)
		return ExitConfig, false
	}
	return ExitOK, true
}
