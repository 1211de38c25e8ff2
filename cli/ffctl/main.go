// Command ffctl is FlowForge's one binary: daemons, scripting and the
// dashboard. It registers only the built-in handlers; see cli.Main to build
// one with your own.
package main

import "github.com/flowforge/flowforge/cli"

func main() { cli.Main(nil) }
