// Command gen writes the reference pages of package docs into the docs folder: `go generate
// ./docs` runs it there. Generated pages it no longer writes are removed.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/flowrun/flowrun/docs"
)

func main() {
	dir := flag.String("dir", ".", "the docs folder")
	flag.Parse()
	if err := write(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "docs/gen:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	pages, _ := docs.Generate()
	stale, err := docs.Stale(dir, pages)
	if err != nil {
		return err
	}
	for _, p := range stale {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			return err
		}
	}
	for _, p := range pages {
		name := filepath.Join(dir, filepath.FromSlash(p.Path))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(name, []byte(p.Content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
