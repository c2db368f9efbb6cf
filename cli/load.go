package cli

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/config"
)

// load reads and validates the configuration, printing every diagnostic to stderr. It returns
// nil when there is any error.
func load(paths []string, opts config.Options, stdio Stdio) *config.Config {
	cfg, diags := config.Load(paths, opts)
	if len(diags) > 0 {
		var files map[string]*hcl.File
		if cfg != nil {
			files = cfg.Files()
		}
		config.WriteDiagnostics(stdio.Err, files, diags)
	}
	if diags.HasErrors() {
		return nil
	}
	return cfg
}

func cmdValidate(args []string, stdio Stdio) int {
	fs := newFlagSet("validate", stdio)
	paths, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	cfg := load(paths, config.Options{}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	fmt.Fprintf(stdio.Out, "ok: %d pipelines\n", len(cfg.Pipelines))
	return ExitOK
}

func cmdFmt(args []string, stdio Stdio) int {
	fs := newFlagSet("fmt", stdio)
	check := fs.Bool("check", false, "list files whose layout differs and exit 1; change nothing")
	paths, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	files, err := hclFiles(paths)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun fmt: %v\n", err)
		return ExitConfig
	}
	differ := false
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			fmt.Fprintf(stdio.Err, "flowrun fmt: %v\n", err)
			return ExitConfig
		}
		out := config.Format(src)
		if bytes.Equal(src, out) {
			continue
		}
		if *check {
			fmt.Fprintln(stdio.Out, name)
			differ = true
			continue
		}
		if err := os.WriteFile(name, out, 0o644); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun fmt: %v\n", err)
			return ExitConfig
		}
		fmt.Fprintln(stdio.Out, name)
	}
	if differ {
		return ExitConfig
	}
	return ExitOK
}

// hclFiles lists the .hcl files named by paths: a file as is, a folder's .hcl files in name order.
func hclFiles(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".hcl") {
				names = append(names, filepath.Join(p, e.Name()))
			}
		}
		sort.Strings(names)
		out = append(out, names...)
	}
	return out, nil
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

var _ flag.Value = (*stringsFlag)(nil)
