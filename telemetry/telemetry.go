// Package telemetry exports OpenTelemetry traces over OTLP/HTTP (SPEC §14): a consumer span per
// delivery with children for the handler, each emit and the settlement, and the W3C traceparent
// on every message flowrun writes. It implements engine.Tracer with the OpenTelemetry Go SDK;
// the engine itself knows nothing of OpenTelemetry.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is what the telemetry block and the environment ask for.
type Config struct {
	// Endpoint is the collector's base URL; traces go to its /v1/traces. "": the standard
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT variables (and the
	// other OTEL_EXPORTER_OTLP_* ones, such as headers), read by the exporter.
	Endpoint    string
	SampleRatio float64 // root spans sampled, 0 to 1
	Version     string  // flowrun's, for the service.version resource attribute
}

// FromEnv reports whether the standard variables name a collector: with neither them nor a
// telemetry block nothing is exported (SPEC §14).
func FromEnv() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Queue bounds: spans wait in a queue of queueSize for an export of up to exportBatch; when the
// collector is slow or down the queue fills and further spans are dropped and counted, so a
// pipeline never waits for a collector.
const (
	queueSize     = 8192
	exportBatch   = 512
	exportEvery   = time.Second
	exportTimeout = 5 * time.Second
)

// Provider is the process's tracer provider; Pipeline gives each pipeline its engine.Tracer.
type Provider struct {
	tp      *sdktrace.TracerProvider
	tracer  trace.Tracer
	proc    *queueProcessor
	prop    propagation.TextMapPropagator
	sampler sdktrace.Sampler // the provider's, asked again for a run span's ids (run.go)
	visits  inflight         // the step visits in flight here, by run (run.go)
}

// New starts the exporter. It does not connect: a collector that is down costs dropped spans,
// logged once per state change, never an error here.
func New(ctx context.Context, c Config, log zerolog.Logger) (*Provider, error) {
	opts := []otlptracehttp.Option{
		otlptracehttp.WithTimeout(exportTimeout),
		// No retries inside an export: the queue keeps filling meanwhile and a retried batch
		// would only delay newer spans; a failed batch is dropped and counted instead.
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
	}
	if c.Endpoint != "" {
		u, err := tracesURL(c.Endpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "flowrun"),
		attribute.String("service.version", c.Version),
	))
	if err != nil {
		res = resource.Default()
	}
	proc := newQueueProcessor(exp, log)
	sampler := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler),
		sdktrace.WithSpanProcessor(proc),
		sdktrace.WithIDGenerator(idGenerator{}), // a run span's ids are the run's (run.go)
	)
	prop := propagation.TraceContext{}
	// Handlers (the http handler, Go handlers' own clients) inject through the global
	// propagator; without telemetry it stays the no-op one.
	otel.SetTextMapPropagator(prop)
	otel.SetTracerProvider(tp)
	return &Provider{tp: tp, tracer: tp.Tracer("github.com/flowrun/flowrun"), proc: proc, prop: prop, sampler: sampler}, nil
}

// tracesURL is the OTLP/HTTP traces URL for a base endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT
// is read: /v1/traces appended to its path.
func tracesURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("telemetry: otlp_endpoint must be an http:// or https:// URL")
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	return u.String(), nil
}

// Dropped is how many spans were dropped: the queue was full, or their export failed.
func (p *Provider) Dropped() int64 { return p.proc.dropped.Load() }

// Exported is how many spans the collector accepted.
func (p *Provider) Exported() int64 { return p.proc.exported.Load() }

// Shutdown exports what is queued, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	return p.tp.Shutdown(ctx)
}
