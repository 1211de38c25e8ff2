package e2e

// The ready dashboard and alert rules of deploy/: they parse, and every
// metric they name is one a live daemon exports.

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/flowforge/flowforge/e2e/harness"
)

const (
	dashboardFile = "../deploy/grafana/flowforge-dashboard.json"
	alertsFile    = "../deploy/prometheus/flowforge-alerts.yaml"
)

// grafanaPanel is the part of a Grafana panel the test reads (rows nest
// their panels when collapsed).
type grafanaPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// dashboardExprs parses the dashboard and returns each target's
// expression, keyed "panel title #n"; it fails the test when the file
// does not parse or holds no panel with a target.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string         `json:"title"`
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s does not parse: %v", dashboardFile, err)
	}
	out := map[string]string{}
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				out[fmt.Sprintf("panel %q #%d", p.Title, i+1)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if d.Title == "" || len(out) == 0 {
		t.Fatalf("%s: title %q, %d targets; want a titled dashboard with panels", dashboardFile, d.Title, len(out))
	}
	return out
}

// alertExprs parses the alert rules (yaml.v3) and returns each rule's
// expression keyed "alert NAME"; every rule must have alert, expr, for,
// labels.severity and annotations.summary.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s does not parse: %v", alertsFile, err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for i, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.For == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: group %q rule %d (%q) lacks alert, expr, for, labels.severity or annotations.summary", alertsFile, g.Name, i+1, r.Alert)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: alert %q: for %q: %v", alertsFile, r.Alert, r.For, err)
			}
			out["alert "+r.Alert] = r.Expr
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no rule", alertsFile)
	}
	return out
}

// exportedFamilies returns the metric families of a /metrics text
// exposition with their types (its # TYPE lines).
func exportedFamilies(body string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// unknownMetrics returns, sorted, "name (where)" for every flowforge_
// metric named in exprs that families does not export (a histogram's
// _bucket, _sum and _count name its family).
func unknownMetrics(exprs map[string]string, families map[string]string) []string {
	name := regexp.MustCompile(`flowforge_[a-z0-9_]+`)
	var out []string
	for where, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			if _, ok := families[n]; ok {
				continue
			}
			known := false
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, suffix); ok && families[base] == "histogram" {
					known = true
				}
			}
			if !known {
				out = append(out, n+" ("+where+")")
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestDashboardAndAlertsNameExportedMetrics: the Grafana dashboard parses
// and has panels, the alert rules parse (yaml.v3) into groups of rules each
// with alert, expr, for, labels.severity and annotations.summary, and every
// flowforge_ metric named in a dashboard target or an alert expression is
// exported by a live `ffctl daemon all`'s /metrics, scraped after it ran a
// workflow to the end (so that the latency histograms have series). The
// failure lists the unknown names and where they are used.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	exprs := dashboardExprs(t)
	for k, v := range alertExprs(t) {
		exprs[k] = v
	}
	s := harness.NewStack(t, harness.StackOptions{})
	d := s.DaemonWithHealth(t, "all", "all")
	s.Apply(t, `
name: dashboard-chain
tasks:
  - {name: first, handler: noop}
  - {name: second, handler: noop, depends_on: [first]}
`)
	id := s.Trigger(t, "dashboard-chain")
	if r := s.WaitRunTerminal(t, id, 60*time.Second); r.State != "SUCCEEDED" {
		t.Fatalf("run %s ended %s, want SUCCEEDED", id, r.State)
	}
	// The run-duration histogram is observed just after the settle
	// commits: poll until the names are exported; the failure lists those
	// still missing.
	var families map[string]string
	harness.Eventually(t, 20*time.Second, "every metric of the dashboard and the alerts to be exported", func() (bool, error) {
		body, err := harness.MetricsText(d.Health)
		if err != nil {
			return false, err
		}
		families = exportedFamilies(body)
		unknown := unknownMetrics(exprs, families)
		return len(unknown) == 0, fmt.Errorf("%d names a live daemon does not export:\n  %s", len(unknown), strings.Join(unknown, "\n  "))
	})
	t.Logf("%d expressions, every flowforge_ name among %d exported families", len(exprs), len(families))
}

// TestEveryAlertIsInTheOperatingPage: docs/operating.md's table of alerts
// names every rule of the alerts file (a trial found two rules the page
// did not list), and names no alert the file does not hold.
func TestEveryAlertIsInTheOperatingPage(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	rules := alertExprs(t)
	for k := range rules {
		if name := strings.TrimPrefix(k, "alert "); !strings.Contains(page, "| `"+name+"` |") {
			t.Errorf("alert %s is not in docs/operating.md's table of alerts", name)
		}
	}
	for _, m := range regexp.MustCompile("\\| `(FlowForge[A-Za-z]+)` \\|").FindAllStringSubmatch(page, -1) {
		if _, ok := rules["alert "+m[1]]; !ok {
			t.Errorf("docs/operating.md lists alert %s, which %s does not hold", m[1], alertsFile)
		}
	}
}
