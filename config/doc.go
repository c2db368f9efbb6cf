// Package config loads and validates flowrun's HCL configuration (SPEC §2, §5, §7, §9).
//
// Load reads every .hcl file of the given paths, decodes each file on its own (one decodeXBlock
// function per block type, each returning its value and the diagnostics it found), then merges
// the files: duplicate names are reported with the place of the first declaration, and references
// between blocks (a source's or emit's redis block, a test's pipeline) are resolved. Problems are
// collected, never returned early, so one load reports all of them, each with a Subject range;
// WriteDiagnostics prints them as FILE:LINE:COL lines with the offending source line and a caret.
//
// A source block is decoded by its kind, registered with package transports: config checks the
// block against the kind's schema (naming the kinds that take an attribute written on the wrong
// one), hands the kind the attributes and the pipeline attributes only it takes, and keeps what
// it decoded in Source.Config; emit blocks are checked against the registered emit kinds. config
// never names a kind, so a program must import the transports it offers, as cli does with
// transports/builtin.
//
// Expression strings (when, outcome, otherwise, emit payload and headers) are compiled by package
// rules; their error positions, relative to the expression text, are translated into positions in
// the HCL file. The package knows nothing about Redis beyond names and addresses.
package config
