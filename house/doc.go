// Package house holds the house rules of this repository as tests: the
// sizes of production functions and files, where the command line and the
// dashboard may start goroutines and handle signals, and which way the
// import arrows point (see ../shared/STYLE.md, "FlowForge, concretely").
// It has no code of its own; `go test ./house` (part of `make test`)
// parses the module's Go files and fails naming each offender and the rule
// it breaks.
package house
