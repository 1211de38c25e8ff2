package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
)

// listWorkflows answers each workflow's newest version, as `ffctl workflow
// list -o json`.
func (s *Server) listWorkflows(w http.ResponseWriter, r *http.Request) {
	s.serveList(w, r, func(_ url.Values, limit int) (any, error) { return s.cfg.Client.ListWorkflows(r.Context(), limit) })
}

// applyWorkflow stores the body, a workflow file (YAML or JSON) named as
// the path, as `ffctl workflow apply -f FILE -o json`: 201 with what was
// stored when it made a new version, 200 when the definition was
// unchanged. The query's allow_unknown_handler and strict are the
// command's --allow-unknown-handler and --strict.
func (s *Server) applyWorkflow(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "allow_unknown_handler", "strict")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	policy := client.HandlerPolicy{AllowHint: "set the query parameter allow_unknown_handler=true"}
	for name, dst := range map[string]*bool{"allow_unknown_handler": &policy.AllowUnknown, "strict": &policy.Strict} {
		if v := q.Get(name); v != "" {
			if *dst, err = strconv.ParseBool(v); err != nil {
				s.writeError(w, r, badInput(fmt.Sprintf("query parameter %s=%q: want true or false", name, v)))
				return
			}
		}
	}
	if policy.AllowUnknown && policy.Strict {
		s.writeError(w, r, badInput("allow_unknown_handler and strict contradict each other: give one"))
		return
	}
	data, err := readBody(w, r, core.MaxWorkflowFileBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.cfg.Client.ApplyWorkflow(r.Context(), data, client.ApplyOptions{Source: "workflow file", Name: r.PathValue("name"), CheckParams: s.cfg.CheckParams,
		Handlers: policy, Actor: actorOf(r.Context())})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.audit(r, "api: apply workflow", "workflow", res.Name, "version", res.Version, "created", res.Created)
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	writeJSON(w, status, res)
}
