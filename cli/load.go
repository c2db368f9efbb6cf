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
	asJSON := fs.Bool("json", false, "print the diagnostics (warnings included) as a JSON array of {severity, file, line, col, message} on stdout, [] when clean")
	paths, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if *asJSON {
		_, diags := config.Load(paths, config.Options{})
		if err := config.WriteDiagnosticsJSON(stdio.Out, diags); err != nil {
			fmt.Fprintf(stdio.Err, "flowrun validate: %v\n", err)
			return ExitConfig
		}
		if diags.HasErrors() {
			return ExitConfig
		}
		return ExitOK
	}
	cfg := load(paths, config.Options{}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	if n := len(cfg.Workflows); n > 0 {
		fmt.Fprintf(stdio.Out, "ok: %d pipelines, %d workflows\n", len(cfg.Pipelines), n)
	} else {
		fmt.Fprintf(stdio.Out, "ok: %d pipelines\n", len(cfg.Pipelines))
	}
	return ExitOK
}

// cmdFmt rewrites files in canonical layout, all or nothing: when any file named does not parse,
// it prints every file's diagnostics, exits 1 and touches no file (SPEC §1); -check reports them
// the same way; -diff prints what would change as a unified diff and rewrites nothing.
func cmdFmt(args []string, stdio Stdio) int {
	fs := newFlagSet("fmt", stdio)
	check := fs.Bool("check", false, "list files whose layout differs and exit 1; change nothing")
	diff := fs.Bool("diff", false, "print a unified diff of what fmt would change instead of rewriting")
	paths, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	names, err := hclFiles(paths)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun fmt: %v\n", err)
		return ExitConfig
	}
	type change struct {
		name     string
		src, out []byte
	}
	var (
		changes []change
		diags   hcl.Diagnostics
		files   = map[string]*hcl.File{}
	)
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			fmt.Fprintf(stdio.Err, "flowrun fmt: %v\n", err)
			return ExitConfig
		}
		out, f, ds := config.Format(name, src)
		files[name] = f
		diags = append(diags, ds...)
		if out != nil && !bytes.Equal(src, out) {
			changes = append(changes, change{name, src, out})
		}
	}
	if len(diags) > 0 {
		config.WriteDiagnostics(stdio.Err, files, diags)
	}
	if diags.HasErrors() {
		fmt.Fprintf(stdio.Err, "flowrun fmt: nothing was changed: fix the errors above first\n")
		return ExitConfig
	}
	for _, c := range changes {
		if *diff {
			unifiedDiff(stdio.Out, c.name+".orig", c.name, c.src, c.out)
			continue
		}
		if !*check {
			if err := replaceFile(c.name, c.out); err != nil {
				fmt.Fprintf(stdio.Err, "flowrun fmt: %v\n", err)
				return ExitConfig
			}
		}
		fmt.Fprintln(stdio.Out, c.name)
	}
	if *check && len(changes) > 0 {
		return ExitConfig
	}
	return ExitOK
}

// replaceFile gives the file at path (through a symbolic link) the content data, keeping its
// mode. A temporary file in the same folder is renamed over it, so a crash or a full disk leaves
// the old content or the new one, never a truncated file.
func replaceFile(path string, data []byte) error {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".fmt-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(st.Mode().Perm())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
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
