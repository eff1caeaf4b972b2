// Package telemetry traces the service with OpenTelemetry, configured by
// the standard OTEL_* variables: incoming HTTP requests, PostgreSQL
// queries, River jobs and provider calls. A trace crosses the outbox: the
// job inserted in a request's transaction carries the request's trace
// context, and the worker's spans for that job (its run, its provider call,
// its recording) belong to the request's trace.
//
// Tracing is off unless an OTLP endpoint is set, and off costs nothing:
// every wrapper then returns what it was given.
package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncepay/oncepay/internal/platform/envconfig"
)

// Config is what the OTEL_* variables say of tracing.
type Config struct {
	// Endpoint is where spans are sent (OTLP over HTTP, protobuf): the
	// traces endpoint as given, or the OTLP endpoint with /v1/traces.
	// Empty turns tracing off.
	Endpoint string
	// ServiceName names the process's spans.
	ServiceName string
}

// ReadConfig reads the tracing configuration from env; defaultService is
// the service name when OTEL_SERVICE_NAME is unset. Only what decides
// whether and where to trace is read here; the exporter's headers, timeout,
// compression and certificates, the sampler and the batching are read by
// the OpenTelemetry SDK from its own variables.
func ReadConfig(env *envconfig.Reader, defaultService string) Config {
	base := env.URL("OTEL_EXPORTER_OTLP_ENDPOINT")
	traces := env.URL("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	// Only OTLP over HTTP with protobuf, the specification's default, is
	// built in: a deployment that asks for another gets an error, not
	// silence.
	protocol := env.OneOf("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "http/protobuf")
	env.OneOf("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol, "http/protobuf")
	exporter := env.OneOf("OTEL_TRACES_EXPORTER", "otlp", "otlp", "none")
	disabled := env.OneOf("OTEL_SDK_DISABLED", "false", "false", "true")
	cfg := Config{ServiceName: env.String("OTEL_SERVICE_NAME", defaultService)}
	switch {
	case exporter == "none" || disabled == "true":
	case traces != "":
		cfg.Endpoint = traces
	case base != "":
		cfg.Endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	return cfg
}

// Tracing is a process's tracing: on, with a provider that exports, or
// off.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// Start starts tracing as cfg says; with no endpoint it returns Tracing
// that is off. Shutdown flushes what is left.
func Start(ctx context.Context, cfg Config) (*Tracing, error) {
	if cfg.Endpoint == "" {
		return &Tracing{}, nil
	}
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(),
		resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return &Tracing{provider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))}, nil
}

// On reports whether spans are exported.
func (t *Tracing) On() bool { return t.provider != nil }

// Stop exports the spans still buffered and stops the exporter, within a
// bound: a collector that is down must not hold the process's exit.
func (t *Tracing) Stop(logger *slog.Logger) {
	if !t.On() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		logger.WarnContext(ctx, "could not send the last traces", slog.Any("error", err))
	}
}

// propagator reads and writes W3C trace context (traceparent).
var propagator = propagation.TraceContext{}

// Handler traces each request to next as a server span, a child of the
// caller's span when the request carries a traceparent. The span is named
// by the method and the route pattern ("POST /v1/payments/{id}/refunds"),
// never by the path, whose ids would make every span a name of its own.
func (t *Tracing) Handler(next http.Handler) http.Handler {
	if !t.On() {
		return next
	}
	named := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A route context made here is the one the router fills in (it
		// reuses one it finds), so the matched pattern can be read after.
		routing := chi.NewRouteContext()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, routing)))
		if pattern := routing.RoutePattern(); pattern != "" {
			span := trace.SpanFromContext(r.Context())
			span.SetName(r.Method + " " + pattern)
			span.SetAttributes(attribute.String("http.route", pattern))
		}
	})
	return otelhttp.NewHandler(named, "http", otelhttp.WithTracerProvider(t.provider), otelhttp.WithPropagators(propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// Transport traces each call through next as a client span. Nothing is
// propagated: the calls go to a third party, which has no use for our
// trace ids.
func (t *Tracing) Transport(next http.RoundTripper) http.RoundTripper {
	if !t.On() {
		return next
	}
	return otelhttp.NewTransport(next, otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Host }))
}

// QueryTracer traces each PostgreSQL query, batch and connect; nil when
// off.
func (t *Tracing) QueryTracer() pgx.QueryTracer {
	if !t.On() {
		return nil
	}
	return otelpgx.NewTracer(otelpgx.WithTracerProvider(t.provider))
}

// RiverMiddleware traces River: inserting a job writes the inserting
// span's trace context into the job's metadata, and working it is a span
// of that trace.
func (t *Tracing) RiverMiddleware() []rivertype.Middleware {
	if !t.On() {
		return nil
	}
	return []rivertype.Middleware{
		river.WorkerMiddlewareFunc(continueTrace),
		otelriver.NewMiddleware(&otelriver.MiddlewareConfig{TracerProvider: t.provider, MeterProvider: metricnoop.NewMeterProvider(),
			EnableTracePropagation: true, EnableWorkSpanJobKindSuffix: true}),
	}
}

// Injector writes the trace context of a context's span into a job's
// metadata, for jobs inserted without River's client (outbox.QueueInsert);
// nil when off.
func (t *Tracing) Injector() func(ctx context.Context, metadata map[string]string) {
	if !t.On() {
		return nil
	}
	return func(ctx context.Context, metadata map[string]string) {
		propagator.Inject(ctx, propagation.MapCarrier(metadata))
	}
}

// continueTrace makes the trace context a job was inserted with the parent
// of its work. River's own middleware only links the work to it, which
// starts a trace per attempt; an operator following a payment wants one
// trace from its request to its provider call, seconds later.
func continueTrace(ctx context.Context, job *rivertype.JobRow, work func(context.Context) error) error {
	var meta map[string]any
	if len(job.Metadata) == 0 || json.Unmarshal(job.Metadata, &meta) != nil {
		return work(ctx)
	}
	carrier := propagation.MapCarrier{}
	for _, key := range propagator.Fields() {
		if v, ok := meta[key].(string); ok {
			carrier[key] = v
		}
	}
	return work(propagator.Extract(ctx, carrier))
}
