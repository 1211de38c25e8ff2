package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core/tracing"
)

// env is a getenv of the given variables only.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestSetupPicksTheExporterOfOTELTracesExporter: unset and "none" give
// the no-op provider (nothing recorded, nothing written); console and
// otlp (and a list) an SDK provider; whitespace and repeats are allowed.
func TestSetupPicksTheExporterOfOTELTracesExporter(t *testing.T) {
	for _, tc := range []struct {
		value   string
		enabled bool
	}{
		{"", false},
		{"none", false},
		{"none,none", false},
		{"console", true},
		{"otlp", true},
		{"otlp, console", true},
		{"console,console", true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			var out bytes.Buffer
			p, err := tracing.Setup(context.Background(), "flowforge-test", &out, env(map[string]string{tracing.EnvExporter: tc.value}), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("Setup(%q) = %v", tc.value, err)
			}
			t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
			if p.Enabled() != tc.enabled {
				t.Fatalf("Enabled() = %v, want %v", p.Enabled(), tc.enabled)
			}
			_, span := tracing.Tracer(p.TracerProvider()).Start(context.Background(), "x")
			if span.IsRecording() != tc.enabled {
				t.Fatalf("a span records: %v, want %v", span.IsRecording(), tc.enabled)
			}
			span.End()
		})
	}
}

// TestSetupRefusesAnUnknownExporter: the error wraps ErrUnknownExporter
// and names the variable, the value and the accepted values.
func TestSetupRefusesAnUnknownExporter(t *testing.T) {
	for _, v := range []string{"jaeger", "console,zipkin", "Console"} {
		_, err := tracing.Setup(context.Background(), "s", &bytes.Buffer{}, env(map[string]string{tracing.EnvExporter: v}), slog.New(slog.DiscardHandler))
		if !errors.Is(err, tracing.ErrUnknownExporter) {
			t.Fatalf("Setup(%q) = %v, want ErrUnknownExporter", v, err)
		}
		want := `unknown traces exporter: OTEL_TRACES_EXPORTER="` + v + `"; accepted values: none, console, otlp (or a comma-separated list of console and otlp)`
		if err.Error() != want {
			t.Fatalf("Setup(%q) error:\n %s\nwant\n %s", v, err, want)
		}
	}
}

// consoleSpan is the part of stdouttrace's JSON a test reads.
type consoleSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Resource    []struct {
		Key   string
		Value struct{ Value any }
	}
}

// TestTheConsoleExporterWritesOneJSONLinePerSpanAtShutdown: the spans
// are flushed by Shutdown as one JSON object per line, with the service
// name of OTEL_SERVICE_NAME when set, else the default given.
func TestTheConsoleExporterWritesOneJSONLinePerSpanAtShutdown(t *testing.T) {
	for _, tc := range []struct{ name, env, want string }{
		{"default", "", "flowforge-worker"},
		{"OTEL_SERVICE_NAME", "billing-worker", "billing-worker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			p, err := tracing.Setup(context.Background(), "flowforge-worker", &out,
				env(map[string]string{tracing.EnvExporter: "console", tracing.EnvServiceName: tc.env}), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			tr := tracing.Tracer(p.TracerProvider())
			ctx, parent := tr.Start(context.Background(), "parent")
			_, child := tr.Start(ctx, "child")
			child.End()
			parent.End()
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("%d lines, want 2:\n%s", len(lines), out.String())
			}
			var spans []consoleSpan
			for _, l := range lines {
				var s consoleSpan
				if err := json.Unmarshal([]byte(l), &s); err != nil {
					t.Fatalf("line %q: %v", l, err)
				}
				spans = append(spans, s)
			}
			if spans[0].Name != "child" || spans[1].Name != "parent" || spans[0].Parent.SpanID != spans[1].SpanContext.SpanID {
				t.Fatalf("spans %+v: want child then parent, the child's parent the parent", spans)
			}
			service := ""
			for _, a := range spans[1].Resource {
				if a.Key == "service.name" {
					service, _ = a.Value.Value.(string)
				}
			}
			if service != tc.want {
				t.Fatalf("service.name = %q, want %q", service, tc.want)
			}
		})
	}
}

// TestTraceparentRoundTripsAndAMalformedOneIsIgnored: the traceparent of
// a span's context gives back that span context through Parent; an empty
// or malformed one leaves the context without a parent.
func TestTraceparentRoundTripsAndAMalformedOneIsIgnored(t *testing.T) {
	p, err := tracing.Setup(context.Background(), "s", &bytes.Buffer{}, env(map[string]string{tracing.EnvExporter: "console"}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tracing.Tracer(p.TracerProvider()).Start(context.Background(), "x")
	defer span.End()
	tp := tracing.Traceparent(ctx)
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if tp != want {
		t.Fatalf("Traceparent = %q, want %q", tp, want)
	}
	got, ok := tracing.Parent(context.Background(), tp)
	if sc := trace.SpanContextFromContext(got); !ok || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() || !sc.IsRemote() {
		t.Fatalf("Parent(%q) = %v, %v; want the span's context, remote", tp, sc, ok)
	}
	if tracing.Traceparent(context.Background()) != "" {
		t.Fatal("Traceparent of a context without a span is not empty")
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-zz-01"} {
		if got, ok := tracing.Parent(context.Background(), bad); ok || trace.SpanContextFromContext(got).IsValid() {
			t.Fatalf("Parent(%q) = ok %v; want ignored", bad, ok)
		}
	}
}

// TestAFailingExportIsLoggedOnceOnTheProcesssLogger: spans sent to an
// OTLP endpoint that refuses connections fail to export; the failure is
// one warning on the logger Setup was given (naming the exporter), not
// one line per batch, and nothing reaches OpenTelemetry's global error
// handler (which prints in the standard library's format, beside a
// daemon's JSON lines).
func TestAFailingExportIsLoggedOnceOnTheProcesssLogger(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	var global []error
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { global = append(global, err) }))
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	// The exporter reads its OTEL_EXPORTER_OTLP_* from the process's
	// environment, Setup through its getenv: both are given them.
	vars := map[string]string{tracing.EnvExporter: "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + refused, "OTEL_EXPORTER_OTLP_TIMEOUT": "2000"}
	for k, v := range vars {
		t.Setenv(k, v)
	}
	p, err := tracing.Setup(context.Background(), "s", &bytes.Buffer{}, env(vars), log)
	if err != nil {
		t.Fatal(err)
	}
	tr := tracing.Tracer(p.TracerProvider())
	for range 3 {
		_, span := tr.Start(context.Background(), "s")
		span.End()
		if err := p.ForceFlush(context.Background()); err != nil {
			t.Fatalf("ForceFlush: %v", err)
		}
	}
	_ = p.Shutdown(context.Background())
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"msg":"tracing: exporting spans failed; they are dropped until it works again (logged once)"`) ||
		!strings.Contains(lines[0], `"exporter":"otlp"`) {
		t.Fatalf("the process's log:\n%s\nwant one warning naming the otlp exporter", logs.String())
	}
	if len(global) != 0 {
		t.Fatalf("the global error handler got %v, want nothing", global)
	}
}

// TestOTLPSendsPlainHTTPToTheDefaultEndpoint: with OTEL_TRACES_EXPORTER=otlp
// and no OTEL_EXPORTER_OTLP_* set, spans go to the specification's default,
// http://localhost:4318/v1/traces, without TLS, where a collector listens
// by default. The SDK's own default is HTTPS there, whose handshake a plain
// collector resets: every span was dropped (a new user's trial).
func TestOTLPSendsPlainHTTPToTheDefaultEndpoint(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE"} {
		t.Setenv(k, "") // the exporter reads the process's environment
	}
	ln, err := net.Listen("tcp", "127.0.0.1:4318")
	if err != nil {
		t.Fatalf("the test needs the default OTLP/HTTP port, 127.0.0.1:4318: %v", err)
	}
	got := make(chan string, 10)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.Path
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p, err := tracing.Setup(context.Background(), "s", &bytes.Buffer{}, env(map[string]string{tracing.EnvExporter: "otlp"}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Tracer(p.TracerProvider()).Start(context.Background(), "s")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown (exports the span): %v", err)
	}
	select {
	case req := <-got:
		if req != "POST /v1/traces" {
			t.Fatalf("the collector got %q, want POST /v1/traces", req)
		}
	default:
		t.Fatal("the collector on http://localhost:4318 got nothing")
	}
}
