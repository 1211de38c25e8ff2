package harness

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricsClient bounds every scrape.
var metricsClient = &http.Client{Timeout: 5 * time.Second}

// MetricsText GETs http://addr/metrics (addr is a daemon's --health-addr,
// host:port) and returns the Prometheus text exposition. A status other
// than 200 is an error.
func MetricsText(addr string) (string, error) {
	resp, err := metricsClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET http://%s/metrics: %s", addr, resp.Status)
	}
	return string(body), nil
}

// Scrape reads addr's /metrics and returns the sum of the samples of
// metric name (exactly that name: not name_bucket, name_total...) whose
// labels include every one of labels, each written as the exposition
// writes it (`outcome="confirmed"`), and whether any sample matched. A
// metric not exported (yet) reads 0, false.
func Scrape(addr, name string, labels ...string) (value float64, exported bool, err error) {
	text, err := MetricsText(addr)
	if err != nil {
		return 0, false, err
	}
lines:
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name+" ") && !strings.HasPrefix(l, name+"{") {
			continue
		}
		for _, lb := range labels {
			if !strings.Contains(l, lb) {
				continue lines
			}
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, false, fmt.Errorf("parse %q: %w", l, err)
		}
		value += v
		exported = true
	}
	return value, exported, nil
}

// Metric is Scrape's value; it fails the test if addr cannot be scraped.
func Metric(t testing.TB, addr, name string, labels ...string) float64 {
	t.Helper()
	v, _, err := Scrape(addr, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// WaitMetricAtLeast polls Scrape for up to 30 s until the metric reads at
// least want, failing the test then.
func WaitMetricAtLeast(t testing.TB, addr string, want float64, name string, labels ...string) {
	t.Helper()
	Eventually(t, 30*time.Second, fmt.Sprintf("%s%v >= %v on %s", name, labels, want, addr), func() (bool, error) {
		v, _, err := Scrape(addr, name, labels...)
		if err != nil {
			return false, err
		}
		return v >= want, fmt.Errorf("%s%v = %v", name, labels, v)
	})
}

// WaitMetric polls Scrape for up to 30 s until the metric reads exactly
// want, failing the test then (the message says when it overshot).
func WaitMetric(t testing.TB, addr string, want float64, name string, labels ...string) {
	t.Helper()
	Eventually(t, 30*time.Second, fmt.Sprintf("%s%v = %v on %s", name, labels, want, addr), func() (bool, error) {
		v, _, err := Scrape(addr, name, labels...)
		if err != nil {
			return false, err
		}
		if v > want {
			return false, fmt.Errorf("%s%v = %v, overshot %v", name, labels, v, want)
		}
		return v == want, fmt.Errorf("%s%v = %v", name, labels, v)
	})
}
