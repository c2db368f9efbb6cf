// Command flowrun runs declarative pipelines described in HCL files. See README.md.
package main

import (
	"github.com/flowrun/flowrun/cli"
	_ "github.com/flowrun/flowrun/plugins"            // the built-in Go handlers
	_ "github.com/flowrun/flowrun/transports/builtin" // the built-in sources and emits
)

func main() { cli.Main() }
