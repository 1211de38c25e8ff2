package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

func TestSmokeTriggerClaimFinishAdvance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := storetest.New(t)
	def, err := core.ParseDefinition([]byte(`
name: smoke
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ApplyWorkflow(ctx, def); err != nil {
		t.Fatal(err)
	}
	res, err := s.Trigger(ctx, store.TriggerRequest{Workflow: "smoke", Params: json.RawMessage(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.LockOutbox(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 1 {
		t.Fatalf("outbox rows = %d, want 1", len(b.Rows))
	}
	var msg struct {
		TaskRunID string `json:"task_run_id"`
		Token     int64  `json:"fencing_token"`
	}
	json.Unmarshal(b.Rows[0].Payload, &msg)
	b.MarkPublished(ctx, []int64{b.Rows[0].ID})
	b.Commit()
	run, err := s.GetRun(ctx, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	a := run.Tasks[0]
	c, ok, err := s.Claim(ctx, a.ID, msg.Token, "w1", 30*time.Second)
	if err != nil || !ok {
		t.Fatalf("claim: ok=%v err=%v", ok, err)
	}
	if _, ok, _ := s.Claim(ctx, a.ID, msg.Token, "w2", 30*time.Second); ok {
		t.Fatal("second claim won")
	}
	st, ok, err := s.Finish(ctx, store.FinishRequest{ID: a.ID, Token: c.FencingToken, Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"n":1}`), WorkerID: "w1"})
	if err != nil || !ok || st != core.TaskSucceeded {
		t.Fatalf("finish: %v %v %v", st, ok, err)
	}
	// The finish promoted the child itself (the counter join); the pass
	// finds nothing to do (the trigger wrote the run RUNNING).
	adv, err := s.Advance(ctx, nil, 100, "test")
	if err != nil {
		t.Fatal(err)
	}
	if adv.Promoted != 0 || adv.RunsChanged != 0 {
		t.Fatalf("the pass after the finish: %+v, want nothing promoted and the run's state as it was", adv)
	}
	run, _ = s.GetRun(ctx, res.RunID)
	if run.State != "RUNNING" || run.Tasks[1].State != "READY" {
		t.Fatalf("run %s tasks %+v", run.State, run.Tasks)
	}
}

func TestRedactURLHidesPasswords(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"postgres://u:s3cret@h:5432/db":                "postgres://u:xxxxx@h:5432/db",
		"host=127.0.0.1 port=1 password=s3cret user=u": "host=127.0.0.1 port=1 password=xxxxx user=u",
		"host=h password='it s3cret' user=u":           "host=h password=xxxxx user=u",
		"postgres://h/db":                              "postgres://h/db",
		"postgres://u:s3cret@127.0.0.1:abc/x":          "postgres://u:xxxxx@127.0.0.1:abc/x",
		"postgresql://u:p@ss:w@h:port/db?x=1":          "postgresql://u:xxxxx@h:port/db?x=1",
		"postgres://u@h:abc/db":                        "postgres://u@h:abc/db",
	}
	for in, want := range cases {
		if got := store.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
