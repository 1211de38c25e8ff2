package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ffBuild is one FlowForge tree built for the benchmark: its ffctl and the
// fftrigger load generator compiled against that tree's store (and client).
type ffBuild struct {
	Label   string // column name: "FlowForge" or "FF " + beforeCommit
	Commit  string // git commit of the tree ("+dirty" when the tree has changes)
	FFCTL   string
	Trigger string
	// HasClient says the tree has core/client (issue 25), so that
	// fftrigger's -mode tx and many work; without it fftrigger is built
	// with -tags ffnoclient.
	HasClient bool
	// HasForEach says the tree has the workflow language's for_each (issue
	// 26: core/store/foreach.go), so that its W4e workflow can be applied
	// and run.
	HasForEach bool
	// HasFlow says the tree has flow control (issue 27: core/store/admit.go),
	// so that the flow variants' workflows can be applied and run.
	HasFlow bool
	// HasTaskLogs says the tree has per-task logs (issue 28:
	// core/store/tasklogs.go), so that the task-log variant can run.
	HasTaskLogs bool
	// HasStream says the tree has the transition stream and tracing
	// (issue 28: core/store/stream.go), so that the observability variants
	// can run.
	HasStream bool
}

// buildTree builds ffctl and fftrigger from the module rooted at tree into
// outDir. fftrigger's source files (the .go files of triggerDir,
// scripts/bench/fftrigger of the driver's own tree, links followed) are
// added to tree with go build -overlay, so the tree on disk is never
// written. A tree without core/client gets -tags ffnoclient (see
// ffBuild.HasClient).
func buildTree(ctx context.Context, tree, triggerDir, outDir, label string) (ffBuild, error) {
	b := ffBuild{Label: label, FFCTL: filepath.Join(outDir, "ffctl"), Trigger: filepath.Join(outDir, "fftrigger")}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return b, fmt.Errorf("build %s: %w", label, err)
	}
	srcs, err := filepath.Glob(filepath.Join(triggerDir, "*.go"))
	if err != nil {
		return b, fmt.Errorf("build %s: fftrigger source: %w", label, err)
	}
	if len(srcs) == 0 {
		return b, fmt.Errorf("build %s: no fftrigger source in %s", label, triggerDir)
	}
	overlay := map[string]map[string]string{"Replace": {}}
	for _, src := range srcs {
		overlay["Replace"][filepath.Join(tree, "ffbenchtrigger", filepath.Base(src))] = src
	}
	ov := filepath.Join(outDir, "overlay.json")
	data, _ := json.Marshal(overlay)
	if err := os.WriteFile(ov, data, 0o644); err != nil {
		return b, fmt.Errorf("build %s: %w", label, err)
	}
	_, err = os.Stat(filepath.Join(tree, "core", "client"))
	b.HasClient = err == nil
	_, err = os.Stat(filepath.Join(tree, "core", "store", "foreach.go"))
	b.HasForEach = err == nil
	_, err = os.Stat(filepath.Join(tree, "core", "store", "admit.go"))
	b.HasFlow = err == nil
	_, err = os.Stat(filepath.Join(tree, "core", "store", "tasklogs.go"))
	b.HasTaskLogs = err == nil
	_, err = os.Stat(filepath.Join(tree, "core", "store", "stream.go"))
	b.HasStream = err == nil
	trigger := []string{"build", "-overlay", ov, "-o", b.Trigger, "./ffbenchtrigger"}
	if !b.HasClient {
		trigger = slices.Insert(trigger, 1, "-tags", "ffnoclient")
	}
	for _, args := range [][]string{{"build", "-o", b.FFCTL, "./cli/ffctl"}, trigger} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = tree
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("build %s: go %s: %w\n%s", label, strings.Join(args, " "), err, out)
		}
	}
	return b, nil
}

// exportCommit writes the tree of commit (from the repository at repo) into
// dir with git archive, for a build of that commit beside the current one.
func exportCommit(ctx context.Context, repo, commit, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("export %s: %w", commit, err)
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, commit, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("export %s: %w\n%s", commit, err, out)
	}
	return nil
}

// treeCommit describes the commit of the working tree at repo, with
// "+dirty" when it has uncommitted changes outside scripts/bench.
func treeCommit(ctx context.Context, repo string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	st, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "--", ".", ":!scripts/bench").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "+dirty"
	}
	return c
}
