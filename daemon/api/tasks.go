package api

import (
	"net/http"
	"net/url"

	"github.com/flowforge/flowforge/core/client"
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
