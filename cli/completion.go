package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// cmdCompletion is `flowrun completion bash|zsh|fish`: a script that completes the commands and
// each command's flags, read from the same help that -h prints.
func cmdCompletion(args []string, stdio Stdio) int {
	fs := newFlagSet("completion", stdio)
	pos, err := positionals(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) != 1 {
		fmt.Fprintf(stdio.Err, "flowrun completion: name one shell: bash, zsh or fish\nRun 'flowrun help completion' for usage.\n")
		return ExitConfig
	}
	flags := map[string][]string{}
	for _, c := range commands {
		flags[c.name] = commandFlags(c.name)
	}
	switch pos[0] {
	case "bash":
		writeBash(stdio.Out, flags)
	case "zsh":
		io.WriteString(stdio.Out, "#compdef flowrun\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBash(stdio.Out, flags)
	case "fish":
		writeFish(stdio.Out, flags)
	default:
		msg := fmt.Sprintf("unknown shell %q", pos[0])
		if c := closest(pos[0], []string{"bash", "zsh", "fish"}); c != "" {
			msg += fmt.Sprintf("; did you mean %q?", c)
		}
		fmt.Fprintf(stdio.Err, "flowrun completion: %s\n", msg)
		return ExitConfig
	}
	return ExitOK
}

// commandFlags lists a command's flags ("--name") as its help prints them.
func commandFlags(name string) []string {
	var out strings.Builder
	switch {
	case name == "dlq":
		writeDLQHelp(Stdio{Out: &out, Err: io.Discard})
	case name == "runs":
		writeRunsHelp(Stdio{Out: &out, Err: io.Discard})
	case name != "help" && name != "completion":
		Run(context.Background(), []string{name, "--help"}, Stdio{In: strings.NewReader(""), Out: &out, Err: io.Discard})
	}
	var flags []string
	for line := range strings.Lines(out.String()) {
		if f, ok := strings.CutPrefix(line, "  --"); ok {
			flags = append(flags, "--"+strings.Fields(f)[0])
		}
	}
	return append(flags, "--help")
}

func writeBash(w io.Writer, flags map[string][]string) {
	var b strings.Builder
	b.WriteString("# flowrun bash completion: source <(flowrun completion bash)\n_flowrun() {\n")
	b.WriteString("  local cur=${COMP_WORDS[COMP_CWORD]}\n")
	b.WriteString("  if [ \"$COMP_CWORD\" -eq 1 ]; then\n")
	fmt.Fprintf(&b, "    COMPREPLY=($(compgen -W %q -- \"$cur\"))\n    return\n  fi\n", strings.Join(commandNames(), " ")+" --help --version")
	b.WriteString("  local words\n  case ${COMP_WORDS[1]} in\n")
	for _, c := range commands {
		extra := ""
		switch c.name {
		case "dlq":
			extra = "list redrive purge "
		case "runs":
			extra = strings.Join(runsSubcommands, " ") + " "
		case "completion":
			extra = "bash zsh fish "
		case "help":
			extra = strings.Join(commandNames(), " ") + " "
		}
		fmt.Fprintf(&b, "    %s) words=%q ;;\n", c.name, extra+strings.Join(flags[c.name], " "))
	}
	b.WriteString("  esac\n")
	b.WriteString("  if [[ $cur == -* || -n $words && ${COMP_WORDS[1]} =~ ^(dlq|runs|completion|help)$ && $COMP_CWORD -eq 2 ]]; then\n")
	b.WriteString("    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n  else\n")
	b.WriteString("    COMPREPLY=($(compgen -f -- \"$cur\"))\n  fi\n}\ncomplete -o default -F _flowrun flowrun\n")
	io.WriteString(w, b.String())
}

func writeFish(w io.Writer, flags map[string][]string) {
	var b strings.Builder
	b.WriteString("# flowrun fish completion: flowrun completion fish | source\n")
	b.WriteString("complete -c flowrun -f -n __fish_use_subcommand -l version -d 'print version information'\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "complete -c flowrun -f -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
		for _, f := range flags[c.name] {
			fmt.Fprintf(&b, "complete -c flowrun -n '__fish_seen_subcommand_from %s' -l %s\n", c.name, strings.TrimPrefix(f, "--"))
		}
	}
	b.WriteString("complete -c flowrun -f -n '__fish_seen_subcommand_from dlq' -a 'list redrive purge'\n")
	fmt.Fprintf(&b, "complete -c flowrun -f -n '__fish_seen_subcommand_from runs' -a %s\n", fishQuote(strings.Join(runsSubcommands, " ")))
	b.WriteString("complete -c flowrun -f -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	fmt.Fprintf(&b, "complete -c flowrun -f -n '__fish_seen_subcommand_from help' -a %s\n", fishQuote(strings.Join(commandNames(), " ")))
	io.WriteString(w, b.String())
}

func fishQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
