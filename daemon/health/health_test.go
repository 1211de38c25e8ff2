package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestReadinessFlipsTo503AndBackWithTheDependency(t *testing.T) {
	var down atomic.Bool
	s := New(prometheus.NewRegistry(), nil)
	s.AddReadiness("postgres", func(context.Context) error { return nil })
	s.AddReadiness("rabbitmq", func(context.Context) error {
		if down.Load() {
			return errors.New("not connected")
		}
		return nil
	})
	h := s.Handler()
	get := func() (int, report) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health/ready", nil))
		var r report
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatalf("decode %q: %v", rec.Body.String(), err)
		}
		return rec.Code, r
	}
	steps := []struct {
		down     bool
		code     int
		rabbitmq string
	}{
		{false, http.StatusOK, "ok"},
		{true, http.StatusServiceUnavailable, "error: not connected"},
		{false, http.StatusOK, "ok"},
	}
	for i, st := range steps {
		down.Store(st.down)
		code, r := get()
		if code != st.code || r.Checks["rabbitmq"] != st.rabbitmq || r.Checks["postgres"] != "ok" || len(r.Checks) != 2 {
			t.Errorf("step %d: %d %+v, want %d with rabbitmq %q and postgres ok", i, code, r, st.code, st.rabbitmq)
		}
	}
}

func TestLivenessReportsAStuckLoop(t *testing.T) {
	s := New(prometheus.NewRegistry(), nil)
	s.AddLiveness("scheduler", func() error { return errors.New("no pass for 2m") })
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health/live", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("live = %d, want 503: %s", rec.Code, rec.Body)
	}
}
