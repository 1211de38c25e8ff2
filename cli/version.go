package cli

import (
	"fmt"
	"runtime/debug"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/store"
)

// Version, Commit and BuildDate are set by the linker: `make build` passes
// -ldflags "-X github.com/flowforge/flowforge/cli.Version=$(git describe)
// -X ...cli.Commit=$(git rev-parse HEAD) -X ...cli.BuildDate=$(date -u)".
// They are package-level strings because -X can set nothing else; nothing
// writes them at run time. Empty means unset: `ffctl version` then reports
// the module version and the VCS facts the Go toolchain embeds (see
// readBuild). Commit overrides the toolchain's vcs.revision, which a build
// from a git worktree or with -buildvcs=false lacks.
var (
	Version   string
	Commit    string
	BuildDate string
)

// buildInfo is `ffctl version -o json`. Absent facts are null.
type buildInfo struct {
	// Version: the -X Version, else the module version (a tagged `go
	// install`), else "dev".
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from (the -X
	// Commit, else vcs.revision).
	Commit *string `json:"commit"`
	// CommitTime is that revision's time, RFC 3339 (vcs.time; null when
	// only the -X Commit is known).
	CommitTime *string `json:"commit_time"`
	// Modified: the working tree had uncommitted changes (vcs.modified).
	Modified *bool `json:"modified"`
	// BuildDate is the -X BuildDate.
	BuildDate *string `json:"build_date"`
	GoVersion string  `json:"go_version"`
	Schema    struct {
		Min    int64 `json:"min"`    // the oldest schema version this ffctl runs on
		Latest int64 `json:"latest"` // the newest one it knows (and migrates to)
	} `json:"schema"`
}

// readBuild collects what the binary knows about its own build: the
// linker's variables and runtime/debug.ReadBuildInfo's module version and
// VCS settings.
func readBuild() buildInfo {
	b := buildInfo{Version: Version}
	if BuildDate != "" {
		d := BuildDate
		b.BuildDate = &d
	}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		b.GoVersion = bi.GoVersion
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			v := s.Value
			switch s.Key {
			case "vcs.revision":
				b.Commit = &v
			case "vcs.time":
				b.CommitTime = &v
			case "vcs.modified":
				m, err := strconv.ParseBool(v)
				if err == nil {
					b.Modified = &m
				}
			}
		}
	}
	if Commit != "" && (b.Commit == nil || *b.Commit != Commit) {
		c := Commit
		b.Commit, b.CommitTime, b.Modified = &c, nil, nil
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

func versionCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print ffctl's version, the commit and date it was built from, and the schema versions it runs against",
		UsageText: "ffctl version [-o json]\n\n" +
			"The version is the one `make build` stamps (git describe), else the module version, else dev;\n" +
			"the commit, its time and whether the tree was modified come from the Go toolchain's VCS stamp.\n\n" +
			"Example:\n  ffctl version   # also: ffctl --version\n  ffctl version -o json | jq -r .commit",
		Flags: []cli.Flag{outputFlag()},
		Action: func(c *cli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if c.NArg() != 0 {
				return usageError("version takes no arguments")
			}
			w, err := store.EmbeddedSchemaWindow()
			if err != nil {
				return failure(err)
			}
			b := readBuild()
			b.Schema.Min, b.Schema.Latest = w.Min, w.Latest
			if format == "json" {
				return writeJSON(env.Stdout, b)
			}
			commit := "unknown (built without VCS information)"
			if b.Commit != nil {
				commit = *b.Commit
				if b.Modified != nil && *b.Modified {
					commit += " (modified)"
				}
				if b.CommitTime != nil {
					commit += ", committed " + *b.CommitTime
				}
			}
			built := "unknown"
			if b.BuildDate != nil {
				built = *b.BuildDate
			}
			fmt.Fprintf(env.Stdout, "ffctl %s\ncommit: %s\nbuilt: %s with %s\nschema: runs on versions %d and newer, knows up to %d (a database whose compat floor is above %d needs a newer ffctl)\n",
				b.Version, commit, built, b.GoVersion, w.Min, w.Latest, w.Latest)
			return nil
		},
	}
}
