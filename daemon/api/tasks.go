package api

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
)

// showTask answers the task with its history and attempts, as `ffctl task
// show -o json`.
func (s *Server) showTask(w http.ResponseWriter, r *http.Request) {
	t, err := s.cfg.Client.Task(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// taskLogs answers a page of the task's log (client.TaskLogPage: its
// state and lines, oldest first), as `ffctl task logs -o json` reads it:
// ?attempt=N one attempt's lines; ?after_attempt=&after_seq= the lines
// after that one (a follower passes its last line's; a seq is below 1
// for lines of an attempt run before a requeue, store.shiftLogsOfRQ); ?limit= at most so
// many (default and most store.TaskLogPageDefault). The task's state in
// the page tells a follower when to stop: a final state.
func (s *Server) taskLogs(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "attempt", "after_attempt", "after_seq", "limit")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var tq client.TaskLogQuery
	for _, p := range []struct {
		name string
		min  int
		dst  *int
	}{{"attempt", 1, &tq.Attempt}, {"after_attempt", 0, &tq.AfterAttempt}, {"after_seq", math.MinInt32, &tq.AfterSeq}, {"limit", 1, &tq.Limit}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < p.min || (p.name == "limit" && n > store.TaskLogPageDefault) {
			s.writeError(w, r, badInput(fmt.Sprintf("%s %q: want a whole number from %d%s", p.name, v, p.min, limitMax(p.name))))
			return
		}
		*p.dst = n
	}
	page, err := s.cfg.Client.TaskLogs(r.Context(), r.PathValue("id"), tq)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// limitMax is " to N" for the limit parameter of taskLogs, "" otherwise.
func limitMax(name string) string {
	if name == "limit" {
		return fmt.Sprintf(" to %d", store.TaskLogPageDefault)
	}
	return ""
}

// listDead answers the DEAD tasks the query selects (workflow, run,
// limit), most recent death first, as `ffctl dead list -o json`.
func (s *Server) listDead(w http.ResponseWriter, r *http.Request) {
	s.serveList(w, r, func(q url.Values, limit int) (any, error) {
		return s.cfg.Client.ListDead(r.Context(), client.DeadFilter{Workflow: q.Get("workflow"), Run: q.Get("run"), Limit: limit})
	}, "workflow", "run")
}

// requeueTask moves the DEAD task back to PENDING, audited with the token
// as actor: 200 with its report ({"id", "requeued": true,
// "also_requeued"}, an element of `ffctl dead requeue -o json`); 409 for
// a task that is not DEAD or whose run was cancelled.
func (s *Server) requeueTask(w http.ResponseWriter, r *http.Request) {
	var req reasonRequest
	if err := decodeCommand(w, r, s.cfg.BodyMax, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.cfg.Client.RequeueDead(r.Context(), []string{r.PathValue("id")}, client.ActionOptions{Reason: req.Reason, Actor: actorOf(r.Context())})
	if err == nil && len(res) == 1 {
		err = res[0].Err()
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rep := res[0].Report()
	s.audit(r, "api: requeue", "task_run_id", rep.ID.String(), "also_requeued", len(rep.Also))
	writeJSON(w, http.StatusOK, rep)
}
