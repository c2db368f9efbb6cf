package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/agext/levenshtein"
)

// command is one entry of `flowrun help`: what its usage line, summary and example say. Its flags
// come from the command's own flag set, so help never lists a flag the command does not take.
type command struct {
	name    string
	args    string // after the name in the usage line
	summary string
	example string
	exits   string // its exit codes, as help and the reference in docs/ print them
}

// commands are flowrun's commands in the order `flowrun help` lists them.
var commands = []command{
	{"run", "[flags] [PATH...]", "load, validate and run pipelines until a stop signal or the end of finite input; SIGHUP reloads the files",
		"flowrun run --pipeline payouts --http-addr 127.0.0.1:9090 examples/",
		"0 clean stop; 1 config or usage error (nothing started); 2 runtime failure"},
	{"validate", "[--json] [PATH...]", "check configuration without connecting anywhere; print ok: N pipelines",
		"flowrun validate --json examples/quickstart.hcl",
		"0 valid (warnings included); 1 invalid"},
	{"fmt", "[-check] [-diff] [PATH...]", "rewrite files in canonical HCL layout",
		"flowrun fmt -diff examples/",
		"0; 1 when -check finds a difference or a file does not parse"},
	{"test", "[PATH...]", "run the test blocks of the files and print a line per test",
		"flowrun test examples/",
		"0 all pass; 1 otherwise"},
	{"inspect", "[flags] [PATH...]", "per pipeline: backlog, lag, pending, delayed, dead letters; per workflow: runs per status and per step",
		"flowrun inspect --json --pipeline payouts examples/",
		"0; 1 config or usage error; 2 when Redis cannot be reached"},
	{"dlq", "list|redrive|purge PIPELINE [--limit N] [--where EXPR] [PATH...]", "show dead letters, move them back to the source (a workflow's: resume their runs), or delete them",
		"flowrun dlq list payouts --limit 20 examples/",
		"0; 1 config, usage or filter error; 2 when Redis cannot be reached"},
	{"runs", "list|show|start|cancel|retry WORKFLOW [RUN] [flags] [PATH...]", "list a workflow's runs, show one with its history, start, cancel or retry one",
		"flowrun runs show order 1042 --json examples/",
		"0; 1 config or usage error, an unknown run, --input that is not JSON, a retry of a run not failed or compensated; 2 when Redis cannot be reached"},
	{"graph", "[--format mermaid|dot] [PATH...]", "print the pipelines' topology (sources, emits, retry targets, dead letters) and each workflow as a state diagram",
		"flowrun graph --format dot examples/ | dot -Tsvg > flow.svg",
		"0; 1 config error"},
	{"plugins", "", "list the compiled-in Go handlers",
		"flowrun plugins",
		"0"},
	{"version", "", "print version, Go version and commit",
		"flowrun version",
		"0"},
	{"completion", "bash|zsh|fish", "print a shell completion script",
		"source <(flowrun completion bash)",
		"0; 1 for another shell"},
	{"help", "[COMMAND]", "show the commands, or a command's usage, flags and example",
		"flowrun help run",
		"0; 1 for an unknown command"},
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func commandNames() []string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return names
}

// writeUsage prints the list of commands (`flowrun help`, `flowrun -h`).
func writeUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("flowrun: a declarative workflow engine.\n\nUsage:\n  flowrun COMMAND [flags] [PATH...]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-11s %s\n", c.name, c.summary)
	}
	b.WriteString("\nPATH is an .hcl file or a folder whose .hcl files are read in name order; default \".\".\n")
	b.WriteString("Run 'flowrun help COMMAND' (or 'flowrun COMMAND -h') for a command's flags and an example.\n")
	io.WriteString(w, b.String())
}

// writeCommandHelp prints a command's usage line, summary, flags (with defaults) and example.
// fs may be nil for a command without flags.
func writeCommandHelp(w io.Writer, name string, fs *flag.FlagSet) {
	c, ok := lookupCommand(name)
	if !ok {
		// a subcommand such as "dlq list": its parent's entry
		c, _ = lookupCommand(strings.Fields(name)[0])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: flowrun %s", c.name)
	if c.args != "" {
		b.WriteString(" " + c.args)
	}
	fmt.Fprintf(&b, "\n\n%s.\n", strings.ToUpper(c.summary[:1])+c.summary[1:])
	b.WriteString("\nFlags:\n")
	if fs != nil {
		fs.VisitAll(func(f *flag.Flag) {
			typ, usage := flag.UnquoteUsage(f)
			head := "--" + f.Name
			if typ != "" {
				head += " " + strings.ToUpper(typ)
			}
			switch {
			case strings.Contains(usage, "default"):
			case f.DefValue == "" || f.DefValue == "[]":
				usage += " (default: none)"
			default:
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(&b, "  %s\n        %s\n", head, usage)
		})
	}
	b.WriteString("  -h, --help\n        show this help\n")
	fmt.Fprintf(&b, "\nExample:\n  %s\n", c.example)
	fmt.Fprintf(&b, "\nExit codes: %s.\n", c.exits)
	io.WriteString(w, b.String())
}

// closest returns the candidate nearest to s when it is near enough to be a likely typo, or "".
func closest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := levenshtein.Distance(s, c, nil)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD >= 0 && bestD <= max(2, len(s)/3) && bestD < len(s) {
		return best
	}
	if len(s) >= 2 { // an abbreviation: "insp" for "inspect"
		for _, c := range candidates {
			if strings.HasPrefix(c, s) {
				return c
			}
		}
	}
	return ""
}

// unknownCommand prints the usage error for a command flowrun does not have.
func unknownCommand(w io.Writer, name string) {
	msg := fmt.Sprintf("flowrun: unknown command %q", name)
	if c := closest(name, commandNames()); c != "" {
		msg += fmt.Sprintf("; did you mean %q?", c)
	}
	fmt.Fprintf(w, "%s\nRun 'flowrun help' for the commands.\n", msg)
}

// flagErrors is a flag set's output: the flag package writes its error message here just
// before it calls Usage, and writes nothing before Usage for -h.
type flagErrors struct{ bytes.Buffer }

// setUsage makes fs print the command's help on stdout for -h/--help, and, for a flag error,
// the error on stderr, naming the closest flag when a flag is unknown.
func setUsage(fs *flag.FlagSet, name string, stdio Stdio) {
	var errs flagErrors
	fs.SetOutput(&errs)
	fs.Usage = func() {
		msg := strings.TrimSpace(errs.String())
		errs.Reset()
		if msg == "" {
			writeCommandHelp(stdio.Out, name, fs)
			return
		}
		if bad, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
			bad = strings.TrimLeft(bad, "-")
			msg = fmt.Sprintf("unknown flag --%s", bad)
			var names []string
			fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
			sort.Strings(names)
			if c := closest(bad, append(names, "help")); c != "" {
				msg += fmt.Sprintf("; did you mean --%s?", c)
			}
		}
		fmt.Fprintf(stdio.Err, "flowrun %s: %s\nRun 'flowrun help %s' for usage.\n", name, msg, strings.Fields(name)[0])
	}
}

// cmdHelp is `flowrun help [COMMAND]`: a command's help is what `flowrun COMMAND -h` prints.
func cmdHelp(ctx context.Context, args []string, stdio Stdio) int {
	if len(args) == 0 {
		writeUsage(stdio.Out)
		return ExitOK
	}
	name := args[0]
	switch name {
	case "help", "-h", "--help", "-help":
		writeCommandHelp(stdio.Out, "help", nil)
		return ExitOK
	case "dlq":
		writeDLQHelp(stdio)
		return ExitOK
	case "runs":
		writeRunsHelp(stdio)
		return ExitOK
	}
	if _, ok := lookupCommand(name); !ok {
		unknownCommand(stdio.Err, name)
		return ExitConfig
	}
	return Run(ctx, []string{name, "--help"}, stdio)
}

// writeDLQHelp prints dlq's help: the flags of its subcommands together (list takes --json and
// --full, purge --yes).
func writeDLQHelp(stdio Stdio) {
	fs := flag.NewFlagSet("dlq", flag.ContinueOnError)
	fs.Int("limit", 0, "at most N dead letters (list: default 10; redrive, purge: default all; 0: all)")
	fs.String("where", "", "only the dead letters for which this expr-lang expression is true (the rules' environment plus reason and failed_at)")
	fs.Bool("json", false, "list: print one JSON object per dead letter")
	fs.Bool("full", false, "list: show whole payloads instead of cutting them")
	fs.Bool("yes", false, "purge: delete without asking")
	writeCommandHelp(stdio.Out, "dlq", fs)
	io.WriteString(stdio.Out, `
Subcommands:
  list     show the pipeline's dead letters, oldest first (--limit default 10; 0: all)
  redrive  move dead letters back to the pipeline's source with their retry count reset
           (--limit default 0: all); a workflow's: resume each letter's run at its failed step
  purge    delete dead letters (asks unless --yes; refuses without --yes when not on a terminal)
`)
}

func isHelpFlag(s string) bool { return s == "-h" || s == "--help" || s == "-help" || s == "--h" }
