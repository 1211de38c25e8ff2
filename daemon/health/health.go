// Package health serves a daemon's HTTP endpoints: /health/live (the
// process's loops are alive), /health/ready (200 only when every dependency
// the process uses answers; 503 otherwise, with a JSON body naming each
// dependency and its status) and /metrics (Prometheus text format).
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one dependency answers; nil means ok. It must
// return within the context's deadline.
type Check func(ctx context.Context) error

// CheckTimeout bounds every readiness check.
const CheckTimeout = 2 * time.Second

// Server is the health and metrics HTTP server of one process.
type Server struct {
	mu     sync.Mutex
	checks map[string]Check
	live   map[string]func() error
	reg    *prometheus.Registry
	log    *slog.Logger
	srv    *http.Server
	ln     net.Listener
	served chan struct{} // closed when Start's serving goroutine returns
}

// New returns a server exposing reg. Checks may be registered before or
// after Start.
func New(reg *prometheus.Registry, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{checks: map[string]Check{}, live: map[string]func() error{}, reg: reg, log: log}
}

// AddReadiness registers a dependency check under name ("postgres",
// "rabbitmq"). Adding a name twice replaces the check.
func (s *Server) AddReadiness(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = c
}

// AddLiveness registers a loop's liveness probe: nil while the loop runs.
func (s *Server) AddLiveness(name string, f func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[name] = f
}

// Handler returns the HTTP handler (useful in tests).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health/live", s.serveLive)
	mux.HandleFunc("/health/ready", s.serveReady)
	// OpenMetrics when the scraper asks for it (Accept): the only format
	// that carries the latency histograms' exemplars (trace ids).
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg, EnableOpenMetrics: true}))
	return mux
}

// Start listens on addr (host:port; port 0 picks one) and serves in the
// background. It returns the bound address.
func (s *Server) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("health server: listen %s: %w", addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("health: serve", "error", err)
		}
	}()
	return ln.Addr().String(), nil
}

// StartPreferred is Start for a default address: when addr's port is
// already in use (EADDRINUSE: another daemon on this host has it), it
// listens on a free port of the same host instead and reports fellBack, so
// that several daemons with default settings share a host. Any other error
// is returned as Start returns it. An address the operator chose should go
// to Start, which stays strict.
func (s *Server) StartPreferred(addr string) (bound string, fellBack bool, err error) {
	bound, err = s.Start(addr)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return bound, false, err
	}
	host, _, serr := net.SplitHostPort(addr)
	if serr != nil {
		return "", false, err
	}
	bound, err = s.Start(net.JoinHostPort(host, "0"))
	return bound, err == nil, err
}

// Stop shuts the server down, waiting up to ctx for open requests, and
// returns once the serving goroutine has returned.
func (s *Server) Stop(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close() // ctx ended first: drop the open requests
	}
	<-s.served
	return err
}

type report struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

func writeReport(w http.ResponseWriter, rep report) {
	w.Header().Set("Content-Type", "application/json")
	if rep.Status != "ok" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rep)
}

func (s *Server) serveLive(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	live := make(map[string]func() error, len(s.live))
	for k, v := range s.live {
		live[k] = v
	}
	s.mu.Unlock()
	rep := report{Status: "ok", Checks: map[string]string{}}
	for name, f := range live {
		if err := f(); err != nil {
			rep.Status = "error"
			rep.Checks[name] = "error: " + err.Error()
		} else {
			rep.Checks[name] = "ok"
		}
	}
	writeReport(w, rep)
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	names := make([]string, 0, len(s.checks))
	checks := make(map[string]Check, len(s.checks)) // a copy: checks may be added while serving
	for n, c := range s.checks {
		names = append(names, n)
		checks[n] = c
	}
	s.mu.Unlock()
	sort.Strings(names)
	ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
	defer cancel()
	type res struct {
		name string
		err  error
	}
	out := make(chan res, len(names))
	for _, n := range names {
		go func(n string, c Check) { out <- res{n, c(ctx)} }(n, checks[n])
	}
	rep := report{Status: "ok", Checks: map[string]string{}}
	for range names {
		x := <-out
		if x.err != nil {
			rep.Status = "error"
			rep.Checks[x.name] = "error: " + x.err.Error()
		} else {
			rep.Checks[x.name] = "ok"
		}
	}
	writeReport(w, rep)
}
