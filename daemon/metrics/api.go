package metrics

import "github.com/prometheus/client_golang/prometheus"

// AuthFailureReasons are the labels of Metrics.APIAuthFailures: why the
// HTTP API refused a request's credentials. missing: no Authorization
// header (or not "Bearer"); malformed, unknown, revoked, expired: the
// token's (core/client's AuthError reasons); limited: the source had
// failed too often and was refused without a check (429).
func AuthFailureReasons() []string {
	return []string{"missing", "malformed", "unknown", "revoked", "expired", "limited"}
}

// APIMetrics are the HTTP API's collectors (daemon/api).
type APIMetrics struct {
	// Requests counts answered requests by route (the pattern, such as
	// "GET /v1/runs/{id}"; "unmatched" for none) and status code.
	Requests *prometheus.CounterVec
	// AuthFailures counts refused credentials by reason
	// (AuthFailureReasons); every reason is exported from the start.
	AuthFailures *prometheus.CounterVec
}

// API registers the HTTP API's collectors on m's registry the first time
// it is called and returns them; later calls return the same ones. Only a
// process that serves the API exports them.
func (m *Metrics) API() *APIMetrics {
	m.apiOnce.Do(func() {
		a := &APIMetrics{
			Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_api_requests_total",
				Help: "HTTP API requests answered, by route and status code."}, []string{"route", "code"}),
			AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_api_auth_failures_total",
				Help: labelHelp("HTTP API requests whose credentials were refused, by reason", "reason", AuthFailureReasons())}, []string{"reason"}),
		}
		m.Registry.MustRegister(a.Requests, a.AuthFailures)
		for _, r := range AuthFailureReasons() {
			a.AuthFailures.WithLabelValues(r)
		}
		m.api = a
	})
	return m.api
}
