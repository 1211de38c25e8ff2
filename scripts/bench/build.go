package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ffBuild is one FlowForge tree built for the benchmark: its ffctl and the
// fftrigger load generator compiled against that tree's store.
type ffBuild struct {
	Label   string // column name: "FlowForge" or "FF " + beforeCommit
	Commit  string // git commit of the tree ("+dirty" when the tree has changes)
	FFCTL   string
	Trigger string
}

// buildTree builds ffctl and fftrigger from the module rooted at tree into
// outDir. fftrigger's source (scripts/bench/fftrigger/main.go of the
// driver's own tree) is added to tree with go build -overlay, so the tree on
// disk is never written.
func buildTree(ctx context.Context, tree, triggerSrc, outDir, label string) (ffBuild, error) {
	b := ffBuild{Label: label, FFCTL: filepath.Join(outDir, "ffctl"), Trigger: filepath.Join(outDir, "fftrigger")}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return b, fmt.Errorf("build %s: %w", label, err)
	}
	overlay := map[string]map[string]string{"Replace": {filepath.Join(tree, "ffbenchtrigger", "main.go"): triggerSrc}}
	ov := filepath.Join(outDir, "overlay.json")
	data, _ := json.Marshal(overlay)
	if err := os.WriteFile(ov, data, 0o644); err != nil {
		return b, fmt.Errorf("build %s: %w", label, err)
	}
	for _, args := range [][]string{
		{"build", "-o", b.FFCTL, "./cli/ffctl"},
		{"build", "-overlay", ov, "-o", b.Trigger, "./ffbenchtrigger"},
	} {
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
