package config

// The built-in transports register their kinds, as they do in every binary built on cli.
import _ "github.com/flowrun/flowrun/transports/builtin"
