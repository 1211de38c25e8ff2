package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// results is everything one run produced: the JSON file's content.
type results struct {
	Started time.Time             `json:"started"`
	Seconds float64               `json:"seconds"`
	Command string                `json:"command"`
	Plan    plan                  `json:"plan"`
	Machine machine               `json:"machine"`
	Servers map[string]string     `json:"servers"`
	Systems map[string]systemInfo `json:"systems"`
	Rows    []row                 `json:"table"`
	Samples []sample              `json:"samples"`
	Notes   []string              `json:"notes"`
}

// systemInfo describes a column: what was measured and how, or why not.
type systemInfo struct {
	Label       string   `json:"label"`
	Version     string   `json:"version,omitempty"`
	Unavailable string   `json:"unavailable,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	// Defaults says what the system's defaults were where the tree
	// decides them (FlowForge: the worker's default --concurrency).
	Defaults string `json:"defaults,omitempty"`
}

// machine is what the run ran on.
type machine struct {
	Host      string  `json:"host"`
	CPU       string  `json:"cpu"`
	Cores     int     `json:"cores"`
	MemoryGB  float64 `json:"memory_gb"`
	Kernel    string  `json:"kernel"`
	Go        string  `json:"go"`
	LoadStart string  `json:"loadavg_start"`
	LoadEnd   string  `json:"loadavg_end"`
}

func readMachine(ctx context.Context) machine {
	host, _ := os.Hostname()
	m := machine{Host: host, LoadStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				m.Cores++
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			m.MemoryGB = kb / (1 << 20)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	return m
}

// loadAvg is /proc/loadavg's 1, 5 and 15 minute averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return strings.TrimSpace(string(b))
	}
	return strings.Join(f[:3], " ")
}

// writeResults writes res as JSON to out, or by default to
// scripts/bench/results/<date>-<host>.json (make bench) or to the work
// directory's results.json (make bench-quick, so that a quick run never
// overwrites a full one), and returns the path.
func writeResults(res results, out, repo string, quick bool) (string, error) {
	if out == "" {
		name := res.Started.UTC().Format("2006-01-02") + "-" + res.Machine.Host + ".json"
		out = filepath.Join(repo, "scripts", "bench", "results", name)
		if quick {
			out = filepath.Join(repo, "scripts", "bench", "results", "quick", name)
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("results: %w", err)
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return "", fmt.Errorf("results: %w", err)
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("results: %w", err)
	}
	return out, nil
}
