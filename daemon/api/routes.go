package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/flowforge/flowforge/core/auth"
)

// Route is one route of the API: its method, its path pattern (Go's
// ServeMux syntax, {name} a path segment), the role a token needs for it,
// and what it does.
type Route struct {
	Method  string
	Pattern string
	Need    auth.Role
	handle  http.HandlerFunc
}

// Routes lists the API's routes, each method and pattern as
// docs/openapi.yaml documents it (a test holds the two together).
func Routes() []Route {
	var s Server
	rs := s.routes()
	for i := range rs {
		rs[i].handle = nil
	}
	return rs
}

// routes is the route table: every route and the role it needs.
func (s *Server) routes() []Route {
	return []Route{
		{http.MethodGet, "/v1/workflows", auth.RoleViewer, s.listWorkflows},
		{http.MethodPut, "/v1/workflows/{name}", auth.RoleAdmin, s.applyWorkflow},
		{http.MethodPost, "/v1/workflows/{name}/runs", auth.RoleOperator, s.triggerRun},
		{http.MethodGet, "/v1/runs", auth.RoleViewer, s.listRuns},
		{http.MethodGet, "/v1/runs/{id}", auth.RoleViewer, s.showRun},
		{http.MethodGet, "/v1/runs/{id}/wait", auth.RoleViewer, s.waitRun},
		{http.MethodPost, "/v1/runs/{id}/cancel", auth.RoleOperator, s.cancelRun},
		{http.MethodGet, "/v1/tasks/{id}", auth.RoleViewer, s.showTask},
		{http.MethodGet, "/v1/tasks/{id}/logs", auth.RoleViewer, s.taskLogs},
		{http.MethodPost, "/v1/tasks/{id}/requeue", auth.RoleOperator, s.requeueTask},
		{http.MethodGet, "/v1/dead", auth.RoleViewer, s.listDead},
		// Sending an event completes the tasks waiting for it and so moves
		// their runs on, as a trigger starts one: an operator's.
		{http.MethodPost, "/v1/events/{name}", auth.RoleOperator, s.sendEvent},
		{http.MethodGet, "/v1/events", auth.RoleViewer, s.listEvents},
	}
}

// routePath is a path pattern with the methods its routes take (the Allow
// header of a 405).
type routePath struct {
	pattern string
	allow   string
}

// routePaths returns each pattern of rs once, with its methods.
func routePaths(rs []Route) []routePath {
	methods := map[string][]string{}
	var order []string
	for _, r := range rs {
		if _, seen := methods[r.Pattern]; !seen {
			order = append(order, r.Pattern)
		}
		methods[r.Pattern] = append(methods[r.Pattern], r.Method)
	}
	out := make([]routePath, 0, len(order))
	for _, p := range order {
		m := methods[p]
		slices.Sort(m)
		out = append(out, routePath{pattern: p, allow: strings.Join(m, ", ")})
	}
	return out
}
