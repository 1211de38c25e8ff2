package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

const (
	dispatchTaskRunID = "6f1c3e0e-6a63-4d3a-9a55-6f6b7cf1a001"
	dispatchRunID     = "6f1c3e0e-6a63-4d3a-9a55-6f6b7cf1a002"
	// dispatchInstallation and dispatchOther are two installations' ids.
	dispatchInstallation = "6f1c3e0e-6a63-4d3a-9a55-6f6b7cf1a003"
	dispatchOther        = "6f1c3e0e-6a63-4d3a-9a55-6f6b7cf1a004"
)

// dispatchBody is a well-formed version-less message with extra appended
// inside the object (each entry of extra a `"key": value` pair).
func dispatchBody(extra ...string) string {
	fields := append([]string{
		`"task_run_id": "` + dispatchTaskRunID + `"`,
		`"run_id": "` + dispatchRunID + `"`,
		`"fencing_token": 3`,
		`"task": "a"`,
	}, extra...)
	return "{" + strings.Join(fields, ", ") + "}"
}

// TestDecodeDispatchIgnoresUnknownFieldsAndRequiresTheKnownOnes: a message
// from a newer scheduler (an extra field) decodes; one that lacks or breaks
// a required field is ErrBadDispatch.
func TestDecodeDispatchIgnoresUnknownFieldsAndRequiresTheKnownOnes(t *testing.T) {
	cases := []struct {
		name string
		body string
		ok   bool
	}{
		{"today's message", dispatchBody(`"v": 1`, `"handler": "noop"`), true},
		{"without the optional handler", dispatchBody(), true},
		{"a field from the future", dispatchBody(`"handler": "noop"`, `"future_field": 1`), true},
		{"a structured field from the future", `{"future": {"x": [1, 2]}, "task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 3, "task": "a"}`, true},
		{"no task_run_id", `{"run_id": "` + dispatchRunID + `", "fencing_token": 3, "task": "a"}`, false},
		{"no run_id", `{"task_run_id": "` + dispatchTaskRunID + `", "fencing_token": 3, "task": "a"}`, false},
		{"no task", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 3}`, false},
		{"zero token", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": 0, "task": "a"}`, false},
		{"a known field of the wrong type", `{"task_run_id": "` + dispatchTaskRunID + `", "run_id": "` + dispatchRunID + `", "fencing_token": "3", "task": "a"}`, false},
		{"an extra field but nothing required", `{"surprise": true}`, false},
		{"a version but nothing required", `{"v": 1}`, false},
		{"trailing data", dispatchBody() + ` {}`, false},
		{"not an object", `[1, 2]`, false},
		{"not JSON", `nope`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := core.DecodeDispatch([]byte(c.body))
			if c.ok {
				if err != nil {
					t.Fatalf("DecodeDispatch: %v", err)
				}
				if d.TaskRunID.String() != dispatchTaskRunID || d.RunID.String() != dispatchRunID || d.FencingToken != 3 || d.Task != "a" {
					t.Fatalf("decoded %+v", d)
				}
				return
			}
			if !errors.Is(err, core.ErrBadDispatch) {
				t.Fatalf("DecodeDispatch = %+v, %v; want ErrBadDispatch", d, err)
			}
		})
	}
}

// TestDecodeDispatchReadsAMissingVersionAsOneAndRunsANewerOne: a message
// without v (an older binary's, still queued in a rolling deploy) is
// version 1; a higher v is decoded like any other (a newer version only
// adds fields); a v no writer can have written is ErrBadDispatch.
func TestDecodeDispatchReadsAMissingVersionAsOneAndRunsANewerOne(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		wantV int // 0: ErrBadDispatch
	}{
		{"no v", dispatchBody(), 1},
		{"v null", dispatchBody(`"v": null`), 1},
		{"this version", dispatchBody(`"v": 1`), 1},
		{"a newer version with a new field", dispatchBody(`"v": 2`, `"priority": 7`), 2},
		{"a much newer version", `{"v": 1000, "handler": "noop", ` + dispatchBody()[1:], 1000},
		{"v zero", dispatchBody(`"v": 0`), 0},
		{"v negative", dispatchBody(`"v": -1`), 0},
		{"v a string", dispatchBody(`"v": "2"`), 0},
		{"v a fraction", dispatchBody(`"v": 1.5`), 0},
		{"v an object", dispatchBody(`"v": {"major": 2}`), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := core.DecodeDispatch([]byte(c.body))
			if c.wantV == 0 {
				if !errors.Is(err, core.ErrBadDispatch) {
					t.Fatalf("DecodeDispatch = %+v, %v; want ErrBadDispatch", d, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeDispatch: %v", err)
			}
			want := core.Dispatch{V: c.wantV, TaskRunID: uuid.MustParse(dispatchTaskRunID), RunID: uuid.MustParse(dispatchRunID), FencingToken: 3, Task: "a"}
			if strings.Contains(c.body, `"handler"`) {
				want.Handler = "noop"
			}
			if d != want {
				t.Fatalf("decoded %+v, want %+v", d, want)
			}
		})
	}
}

// TestADispatchRoundTripsThroughJSON: what json.Marshal writes of a
// Dispatch, DecodeDispatch reads back unchanged, v included.
func TestADispatchRoundTripsThroughJSON(t *testing.T) {
	want := core.Dispatch{V: core.DispatchVersion, TaskRunID: uuid.MustParse(dispatchTaskRunID), RunID: uuid.MustParse(dispatchRunID), FencingToken: 9, Task: "t", Handler: "h",
		Installation: uuid.MustParse(dispatchInstallation)}
	body, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := core.DecodeDispatch(body)
	if err != nil {
		t.Fatalf("DecodeDispatch(%s): %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

// TestDecodeDispatchReadsTheOptionalInstallation: version 2's installation
// is read when present; a message without it (version 1, an older binary)
// or with null has none; one that is not a uuid is ErrBadDispatch (a
// known field of the wrong type).
func TestDecodeDispatchReadsTheOptionalInstallation(t *testing.T) {
	cases := []struct {
		name string
		body string
		want uuid.UUID
		ok   bool
	}{
		{"version 2 with its installation", dispatchBody(`"v": 2`, `"installation": "`+dispatchInstallation+`"`), uuid.MustParse(dispatchInstallation), true},
		{"version 1 without one", dispatchBody(`"v": 1`), uuid.Nil, true},
		{"no version, no installation", dispatchBody(), uuid.Nil, true},
		{"installation null", dispatchBody(`"v": 2`, `"installation": null`), uuid.Nil, true},
		{"installation not a uuid", dispatchBody(`"v": 2`, `"installation": "nope"`), uuid.Nil, false},
		{"installation empty", dispatchBody(`"v": 2`, `"installation": ""`), uuid.Nil, false},
		{"installation a number", dispatchBody(`"v": 2`, `"installation": 7`), uuid.Nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := core.DecodeDispatch([]byte(c.body))
			if !c.ok {
				if !errors.Is(err, core.ErrBadDispatch) {
					t.Fatalf("DecodeDispatch = %+v, %v; want ErrBadDispatch", d, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeDispatch: %v", err)
			}
			if d.Installation != c.want {
				t.Fatalf("installation %s, want %s", d.Installation, c.want)
			}
		})
	}
}

// TestADispatchWithoutAnInstallationIsWrittenWithoutTheField: a Dispatch
// with no installation marshals without the key, as version 1 did.
func TestADispatchWithoutAnInstallationIsWrittenWithoutTheField(t *testing.T) {
	body, err := json.Marshal(core.Dispatch{V: 1, TaskRunID: uuid.MustParse(dispatchTaskRunID), RunID: uuid.MustParse(dispatchRunID), FencingToken: 1, Task: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "installation") {
		t.Fatalf("marshalled %s, want no installation", body)
	}
}

// TestForeignIsAnotherNamedInstallation: only a message naming an
// installation other than a known ours is foreign.
func TestForeignIsAnotherNamedInstallation(t *testing.T) {
	ours, other := uuid.MustParse(dispatchInstallation), uuid.MustParse(dispatchOther)
	cases := []struct {
		name      string
		message   uuid.UUID
		ours      uuid.UUID
		isForeign bool
	}{
		{"ours", ours, ours, false},
		{"another installation's", other, ours, true},
		{"an older binary's, with none", uuid.Nil, ours, false},
		{"ours not known yet", other, uuid.Nil, false},
		{"neither known", uuid.Nil, uuid.Nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := core.Dispatch{Installation: c.message}
			if got := d.Foreign(c.ours); got != c.isForeign {
				t.Fatalf("Foreign = %v, want %v", got, c.isForeign)
			}
		})
	}
}

func TestDispatchHandlerReadsOnlyTheHandler(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"a dispatch", `{"v":2,"task_run_id":"x","handler":"http","task":"a"}`, "http"},
		{"no handler (an older dispatch)", `{"v":1,"task":"a"}`, ""},
		{"not JSON", `garbage`, ""},
		{"not an object", `[1,2]`, ""},
		{"handler not a string", `{"handler":3}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := core.DispatchHandler([]byte(tc.body)); got != tc.want {
				t.Fatalf("DispatchHandler(%s) = %q, want %q", tc.body, got, tc.want)
			}
		})
	}
}

func TestRegistryOnlyKeepsTheNamedHandlers(t *testing.T) {
	reg := core.NewRegistry()
	h := func(context.Context, core.Task) (json.RawMessage, error) { return nil, nil }
	reg.MustRegister("a", h)
	reg.MustRegister("b", h)
	reg.MustRegister("c", h)
	for _, tc := range []struct {
		name    string
		only    []string
		want    []string
		wantErr string
	}{
		{name: "two of three", only: []string{"c", "a"}, want: []string{"a", "c"}},
		{name: "a name twice", only: []string{"b", "b"}, want: []string{"b"}},
		{name: "unknown", only: []string{"a", "z"}, wantErr: `"z" is not a registered handler (registered: a, b, c)`},
		{name: "none", only: nil, wantErr: "no handler named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := reg.Only(tc.only)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Names(), tc.want) {
				t.Fatalf("Names() = %v, want %v", got.Names(), tc.want)
			}
		})
	}
}
