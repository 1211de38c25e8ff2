package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
)

// triggerRequest is the body of POST /v1/workflows/{name}/runs: the run's
// params (a JSON object; absent: {}) and the version to run (0 or absent:
// the newest), and the priority of its tasks (0 or absent: their own), as
// `ffctl run trigger --params-file F --version N --priority P` takes them.
// The idempotency key is the Idempotency-Key header.
type triggerRequest struct {
	Params   json.RawMessage `json:"params"`
	Version  int             `json:"version"`
	Priority int             `json:"priority"`
}

// triggerResponse is the answer to a trigger: the run's id, and whether
// an earlier trigger with the same idempotency key had created it.
type triggerResponse struct {
	RunID    string `json:"run_id"`
	Existing bool   `json:"existing"`
}

// triggerRun starts a run: 201 with its id, 200 when the Idempotency-Key
// names an earlier run of the same workflow and params. A W3C traceparent
// header is honoured: the run's trace continues the caller's (a malformed
// one is ignored).
func (s *Server) triggerRun(w http.ResponseWriter, r *http.Request) {
	var req triggerRequest
	if err := decodeCommand(w, r, s.cfg.BodyMax, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var params any // nil: {}
	if req.Params != nil {
		params = req.Params
	}
	ctx := tracing.FromHeader(r.Context(), r.Header)
	res, err := s.cfg.Client.Trigger(ctx, r.PathValue("name"), params, client.TriggerOptions{IdempotencyKey: key, Version: req.Version, Priority: req.Priority})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.audit(r, "api: trigger", "workflow", r.PathValue("name"), "run_id", res.RunID.String(), "existing", res.Existing)
	w.Header().Set("Location", "/v1/runs/"+res.RunID.String())
	status := http.StatusCreated
	if res.Existing {
		status = http.StatusOK
	}
	writeJSON(w, status, triggerResponse{RunID: res.RunID.String(), Existing: res.Existing})
}

// idempotencyKey is the request's Idempotency-Key header ("" when absent).
// Errors (400): the header twice, or blank.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", badInput("Idempotency-Key given twice: give one key")
	case strings.TrimSpace(vs[0]) == "":
		return "", badInput("Idempotency-Key is empty: give a key, or leave the header out")
	}
	return vs[0], nil
}

// showRun answers the run and its tasks, as `ffctl run show -o json`.
func (s *Server) showRun(w http.ResponseWriter, r *http.Request) {
	run, err := s.cfg.Client.Run(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// listRuns answers the runs the query selects (workflow, state, limit),
// newest first, as `ffctl run list -o json`.
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	s.serveList(w, r, func(q url.Values, limit int) (any, error) {
		runs, err := s.cfg.Client.ListRuns(r.Context(), client.RunFilter{Workflow: q.Get("workflow"), State: core.RunState(strings.ToUpper(q.Get("state"))), Limit: limit})
		if runs == nil && err == nil {
			runs = []client.Run{}
		}
		return runs, err
	}, "workflow", "state")
}

// serveList answers a list route: the query's parameters (known, and
// limit: query and limitOf refuse the others) given to list, whose list
// is the answer.
func (s *Server) serveList(w http.ResponseWriter, r *http.Request, list func(q url.Values, limit int) (any, error), known ...string) {
	q, err := query(r, append(known, "limit")...)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	limit, err := limitOf(q)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v, err := list(q, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// waitRun answers the run once it has ended (200), or 408 when the
// timeout (default WaitDefault, at most Config.WaitMax) passed first.
func (s *Server) waitRun(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "timeout")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	timeout := WaitDefault
	if t := q.Get("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 || d > s.cfg.WaitMax {
			s.writeError(w, r, badInput(fmt.Sprintf("timeout %q: want a duration from 1ms to %s, such as 30s (wait again for longer)", t, s.cfg.WaitMax)))
			return
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	defer context.AfterFunc(s.stopping, cancel)()
	run, err := s.cfg.Client.Wait(ctx, r.PathValue("id"), client.WaitOptions{})
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, run)
	case s.stopping.Err() != nil && r.Context().Err() == nil:
		s.writeError(w, r, &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, message: "the server is stopping: wait again"})
	case !errors.Is(err, context.DeadlineExceeded) || r.Context().Err() != nil:
		s.writeError(w, r, err) // the id's, the database's, or the client gone
	case run.ID == uuid.Nil:
		s.writeError(w, r, fmt.Errorf("wait for run %s: no read answered within %s: %w", r.PathValue("id"), timeout, err))
	default:
		s.writeError(w, r, &apiError{status: http.StatusRequestTimeout, code: CodeTimeout,
			message: fmt.Sprintf("run %s has not ended after %s (state %s): wait again", run.ID, timeout, run.State)})
	}
}

// reasonRequest is the body of a cancel or a requeue: why (required, as
// ffctl's --reason).
type reasonRequest struct {
	Reason string `json:"reason"`
}

// cancelRun cancels the run, audited with the token as actor: 200
// {"run_id", "cancelled": true, "tasks_cancelled"}, as `ffctl run cancel
// -o json`.
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) {
	var req reasonRequest
	if err := decodeCommand(w, r, s.cfg.BodyMax, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	id, err := s.cfg.Client.ResolveID(r.Context(), store.IDRun, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.cfg.Client.Cancel(r.Context(), id.String(), client.ActionOptions{Reason: req.Reason, Actor: actorOf(r.Context())})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.audit(r, "api: cancel", "run_id", id.String(), "tasks_cancelled", res.TasksCancelled)
	writeJSON(w, http.StatusOK, map[string]any{"run_id": id.String(), "cancelled": true, "tasks_cancelled": res.TasksCancelled})
}

// query returns r's query parameters, refusing (400) one that is not in
// known (naming it; a route that takes none refuses any) and one given
// twice.
func query(r *http.Request, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badInput(fmt.Sprintf("query: %v", err))
	}
	for k, vs := range q {
		if !slices.Contains(known, k) {
			takes := "none"
			if len(known) > 0 {
				takes = strings.Join(known, ", ")
			}
			return nil, badInput(fmt.Sprintf("query parameter %q: unknown (this route takes %s)", k, takes))
		}
		if len(vs) > 1 {
			return nil, badInput(fmt.Sprintf("query parameter %q given %d times: give it once", k, len(vs)))
		}
		if strings.TrimSpace(vs[0]) == "" {
			return nil, badInput(fmt.Sprintf("query parameter %q is empty: give a value, or leave it out to select everything", k))
		}
	}
	return q, nil
}

// limitOf reads the query's limit: absent is 0 (the list's default).
// Errors (400): not a whole number.
func limitOf(q url.Values) (int, error) {
	l := q.Get("limit")
	if l == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 {
		return 0, badInput(fmt.Sprintf("limit %q: want a whole number from 1 to %d", l, client.ListLimitMax))
	}
	return n, nil
}

// audit logs a mutating call with its actor (the token's audit name); the
// database's audit tables hold it where ffctl's same action writes one.
func (s *Server) audit(r *http.Request, msg string, args ...any) {
	s.cfg.Logger.Info(msg, append([]any{"actor", actorOf(r.Context()), "remote", r.RemoteAddr}, args...)...)
}
