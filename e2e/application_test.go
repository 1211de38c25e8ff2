package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// applicationSource is the module a FlowForge user writes outside this
// repository: a worker with two typed handlers (cmd/shop-worker) and an
// application that triggers in its own transaction (cmd/shop).
const applicationSource = "testdata/application"

// TestAnApplicationOutsideTheRepositoryTriggersInItsTransaction: a module
// of its own, depending on this checkout through a replace directive (as
// docs/application.md tells a user to), builds a worker (cli.Main with
// core.TypedHandler and core.TypedRunHandler) and an application; the
// application inserts order 42 and triggers its run in one transaction
// and commits, inserts order 43 and triggers in another and rolls back.
// Against real PostgreSQL and RabbitMQ the run of 42 SUCCEEDED with the
// typed handlers' results, order 42 is stored, and of 43 there is neither
// an order nor a run.
func TestAnApplicationOutsideTheRepositoryTriggersInItsTransaction(t *testing.T) {
	bin := buildApplication(t)
	s := harness.NewStack(t, harness.StackOptions{Bin: filepath.Join(bin, "shop-worker")})
	s.Daemon(t, "all", "all")
	yaml, err := os.ReadFile(filepath.Join(applicationSource, "fulfil.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s.Apply(t, string(yaml))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "shop"))
	cmd.Env = append(os.Environ(), s.Env()...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("shop: %v\n%s%s", err, out.String(), errOut.String())
	}
	var run struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		Params json.RawMessage
		Tasks  []struct {
			Name   string          `json:"name"`
			State  string          `json:"state"`
			Result json.RawMessage `json:"result"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(out.Bytes(), &run); err != nil {
		t.Fatalf("shop's output: %v\n%s", err, out.String())
	}
	want := map[string]string{
		"charge": `{"charged": "order 42", "attempt": 1, "currency": "EUR"}`,
		"ship":   `{"label": "1250 cents", "shipped": 42}`,
	}
	if run.State != "SUCCEEDED" || len(run.Tasks) != 2 {
		t.Fatalf("run %s: %s with %d tasks, want SUCCEEDED with 2\n%s", run.ID, run.State, len(run.Tasks), out.String())
	}
	for _, task := range run.Tasks {
		if task.State != "SUCCEEDED" || !sameJSON(task.Result, want[task.Name]) {
			t.Errorf("task %s: %s with result %s, want SUCCEEDED with %s", task.Name, task.State, task.Result, want[task.Name])
		}
	}
	db := s.DB(t)
	for q, want := range map[string]int{
		`SELECT count(*) FROM orders WHERE id = 42 AND amount = 1250`:                                   1,
		`SELECT count(*) FROM orders WHERE id = 43`:                                                     0,
		`SELECT count(*) FROM workflow_runs`:                                                            1,
		`SELECT count(*) FROM workflow_runs WHERE idempotency_key = 'order-42' AND state = 'SUCCEEDED'`: 1,
	} {
		if n := harness.QueryInt(t, db, q); n != want {
			t.Errorf("%s: %d, want %d", q, n, want)
		}
	}
}

// buildApplication copies applicationSource into a module of its own in a
// temporary directory, whose go.mod requires this checkout's module
// through a replace directive (and whose go.sum starts as the checkout's,
// so nothing is fetched that the module cache lacks), builds its commands
// and returns the directory holding them.
func buildApplication(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(applicationSource)); err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(goMod)
	if goVersion == nil {
		t.Fatal("the checkout's go.mod has no go directive")
	}
	mod := fmt.Sprintf("module example.com/shop\n\ngo %s\n\nrequire github.com/flowforge/flowforge v0.0.0-00010101000000-000000000000\n\nreplace github.com/flowforge/flowforge => %s\n", goVersion[1], root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, fs.FileMode(0o644)); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./cmd/...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+os.Getenv("GOFLAGS")+" -mod=mod", "GOWORK=off")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the application module: %v\n%s", err, b)
	}
	t.Logf("built the application module in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// sameJSON reports whether got and want hold equal JSON values.
func sameJSON(got json.RawMessage, want string) bool {
	var g, w any
	return json.Unmarshal(got, &g) == nil && json.Unmarshal([]byte(want), &w) == nil && reflect.DeepEqual(g, w)
}
