package health

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
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

// TestStartPreferredFallsBackToAFreePortOnlyWhenTheAddressIsBusy: a
// default address another process holds gives a free port of the same host
// (several daemons per host); Start, for an address the operator chose,
// stays strict.
func TestStartPreferredFallsBackToAFreePortOnlyWhenTheAddressIsBusy(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	busy := held.Addr().String()
	cases := []struct {
		name         string
		addr         string
		wantFellBack bool
	}{
		{"busy", busy, true},
		{"free", "127.0.0.1:0", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(prometheus.NewRegistry(), nil)
			bound, fellBack, err := s.StartPreferred(c.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Stop(context.Background()) })
			if fellBack != c.wantFellBack || bound == busy || !strings.HasPrefix(bound, "127.0.0.1:") {
				t.Fatalf("StartPreferred(%s) = %s, fell back %v; want another 127.0.0.1 port, fell back %v", c.addr, bound, fellBack, c.wantFellBack)
			}
			resp, err := http.Get("http://" + bound + "/health/live")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /health/live on %s: %v %v", bound, resp, err)
			}
			resp.Body.Close()
		})
	}
	if _, err := New(prometheus.NewRegistry(), nil).Start(busy); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Start(%s) = %v, want EADDRINUSE: a chosen address stays strict", busy, err)
	}
	if _, _, err := New(prometheus.NewRegistry(), nil).StartPreferred("no-port"); err == nil {
		t.Fatal("StartPreferred(no-port) succeeded")
	}
}
