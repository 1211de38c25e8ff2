package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The environment variable Setup reads itself, and its values. The others
// (OTEL_EXPORTER_OTLP_ENDPOINT and the rest of OTEL_EXPORTER_OTLP_*,
// OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_BSP_*) are read by the SDK and its exporters as they document.
const (
	// EnvExporter selects the exporters: a comma-separated list of
	// ExporterOTLP and ExporterConsole, or ExporterNone (the default).
	EnvExporter = "OTEL_TRACES_EXPORTER"
	// EnvServiceName names the process in its spans' resource
	// (service.name); the default is the service Setup is given.
	EnvServiceName = "OTEL_SERVICE_NAME"

	// ExporterNone records nothing: OpenTelemetry's no-op provider.
	ExporterNone = "none"
	// ExporterConsole writes each span as one JSON object per line to the
	// process's standard output (stdouttrace).
	ExporterConsole = "console"
	// ExporterOTLP sends the spans over OTLP/HTTP (protobuf) to
	// OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318).
	ExporterOTLP = "otlp"
)

// ErrUnknownExporter is wrapped by Setup's error when EnvExporter names
// an exporter other than ExporterNone, ExporterConsole and ExporterOTLP.
// ffctl reports it as a usage error (exit 2).
var ErrUnknownExporter = errors.New("unknown traces exporter")

// Provider is a process's tracer provider and how to stop it. The zero
// value is not usable; Setup returns one.
type Provider struct {
	tp  trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil when tracing is off
}

// Setup builds the tracer provider EnvExporter asks for, reading the
// environment through getenv (os.Getenv in ffctl). service is the default
// service.name (EnvServiceName overrides it), e.g. "flowforge-worker".
// console writes to stdout. An export that fails is reported on log
// (once, and once more when exports work again), never through
// OpenTelemetry's global error handler. With EnvExporter empty or "none" it returns
// the no-op provider and allocates nothing else. Spans are exported in
// batches; Shutdown flushes them. Errors: an unknown exporter name
// (wrapping ErrUnknownExporter: the message names the variable, the value
// and the accepted values), or an exporter that could not be built (a
// malformed OTLP setting).
func Setup(ctx context.Context, service string, stdout io.Writer, getenv func(string) string, log *slog.Logger) (*Provider, error) {
	names, err := exporterNames(getenv(EnvExporter))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return &Provider{tp: noop.NewTracerProvider()}, nil
	}
	if s := getenv(EnvServiceName); s != "" {
		service = s
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	for _, name := range names {
		exp, err := newExporter(ctx, name, stdout, getenv)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(&loggedExporter{SpanExporter: exp, name: name, log: log}))
	}
	// No WithSampler: the SDK reads OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG itself (default parentbased_always_on).
	sdk := sdktrace.NewTracerProvider(opts...)
	return &Provider{tp: sdk, sdk: sdk}, nil
}

// exporterNames parses EnvExporter's value: nil for "", "none" or a list
// of "none"s; else the distinct names in order. An unknown name is an
// error wrapping ErrUnknownExporter.
func exporterNames(v string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		switch n {
		case "", ExporterNone:
		case ExporterConsole, ExporterOTLP:
			if !contains(names, n) {
				names = append(names, n)
			}
		default:
			return nil, fmt.Errorf("%w: %s=%q; accepted values: %s, %s, %s (or a comma-separated list of %s and %s)",
				ErrUnknownExporter, EnvExporter, v, ExporterNone, ExporterConsole, ExporterOTLP, ExporterConsole, ExporterOTLP)
		}
	}
	return names, nil
}

func contains(names []string, n string) bool {
	for _, m := range names {
		if m == n {
			return true
		}
	}
	return false
}

// otlpSecurityEnv are the variables that say where and how OTLP connects:
// with none of them set, the exporter sends to the specification's default,
// http://localhost:4318 (otlpDefaults).
var otlpSecurityEnv = []string{
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
	"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
}

// otlpDefaults are the options the OTLP exporter gets beyond what it reads
// from the environment. The OpenTelemetry specification's default endpoint
// for OTLP/HTTP is http://localhost:4318, and a collector listens there
// without TLS; otlptracehttp's own default is the same host and port over
// HTTPS, whose TLS handshake a plain collector resets, so every span was
// dropped (a new user's trial). With no endpoint, no insecure flag and no
// certificate set (otlpSecurityEnv, read through getenv), it is told to use
// plain HTTP; any of them set, it follows them as it documents.
func otlpDefaults(getenv func(string) string) []otlptracehttp.Option {
	for _, k := range otlpSecurityEnv {
		if getenv(k) != "" {
			return nil
		}
	}
	return []otlptracehttp.Option{otlptracehttp.WithInsecure()}
}

// newExporter builds the exporter called name (ExporterConsole or
// ExporterOTLP); getenv is Setup's.
func newExporter(ctx context.Context, name string, stdout io.Writer, getenv func(string) string) (sdktrace.SpanExporter, error) {
	if name == ExporterConsole {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(stdout))
		if err != nil {
			return nil, fmt.Errorf("tracing: console exporter: %w", err)
		}
		return exp, nil
	}
	// otlptracehttp reads OTEL_EXPORTER_OTLP_ENDPOINT, _HEADERS, _TIMEOUT
	// and the rest itself; it connects lazily, so a collector that is
	// down delays nothing here.
	exp, err := otlptracehttp.New(ctx, otlpDefaults(getenv)...)
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	return exp, nil
}

// TracerProvider returns the provider to record spans with: the SDK's, or
// the no-op one when tracing is off.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// Shutdown flushes the spans not exported yet and stops the exporters;
// ctx bounds how long it waits (a collector that does not answer). It does
// nothing when tracing is off. Safe to call more than once. The error is
// the exporters' (wrapped).
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// ForceFlush exports the spans ended so far and waits for it, within
// ctx; nothing when tracing is off. The error is the exporters' (wrapped).
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	if err := p.sdk.ForceFlush(ctx); err != nil {
		return fmt.Errorf("tracing: flush: %w", err)
	}
	return nil
}
