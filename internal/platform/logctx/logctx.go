// Package logctx puts what a context knows of the work in scope (the HTTP
// request, the River job, the trace) on every log line written with it, so that a
// line deep in a service names its request or job without each caller
// passing the id along. Code logs with the *Context variants of slog
// (InfoContext, WarnContext, …) for this to work.
package logctx

import (
	"context"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel/trace"
)

type attrsKey struct{}

// With returns a context whose log lines carry attrs, after those ctx
// already carries.
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(attrsKey{}).([]slog.Attr)
	// A new slice: contexts derived from ctx's parent must not see attrs.
	return context.WithValue(ctx, attrsKey{}, append(slices.Clip(prev), attrs...))
}

// Attrs returns the attributes ctx carries for log lines.
func Attrs(ctx context.Context) []slog.Attr {
	attrs, _ := ctx.Value(attrsKey{}).([]slog.Attr)
	return attrs
}

// Handler adds the context's attributes (With) to every record it passes
// on, except those whose key the line already has (on the record, or from
// Logger.With): code that names the id itself keeps its line without a
// duplicate key.
type Handler struct {
	next slog.Handler
	// named are the keys Logger.With gave outside any group; grouped is
	// whether a group is open, where the context's attributes go.
	named   map[string]bool
	grouped bool
}

// NewHandler wraps next.
func NewHandler(next slog.Handler) *Handler { return &Handler{next: next} }

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle adds the context's attributes to r and passes it on, and the
// trace_id and span_id of the span the context carries, if any.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	attrs := Attrs(ctx)
	if span := trace.SpanContextFromContext(ctx); span.IsValid() {
		attrs = append(slices.Clip(attrs), slog.String("trace_id", span.TraceID().String()), slog.String("span_id", span.SpanID().String()))
	}
	if len(attrs) == 0 {
		return h.next.Handle(ctx, r)
	}
	// A line carries a handful of attributes and the context one or two:
	// scanning them costs less than a map on every log line.
	out := r.Clone()
	for _, a := range attrs {
		if (h.grouped || !h.named[a.Key]) && !hasKey(r, a.Key) {
			out.AddAttrs(a)
		}
	}
	return h.next.Handle(ctx, out)
}

func hasKey(r slog.Record, key string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == key
		return !found
	})
	return found
}

// WithAttrs returns a Handler whose next has attrs.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	named := h.named
	if !h.grouped {
		named = make(map[string]bool, len(h.named)+len(attrs))
		for k := range h.named {
			named[k] = true
		}
		for _, a := range attrs {
			named[a.Key] = true
		}
	}
	return &Handler{next: h.next.WithAttrs(attrs), named: named, grouped: h.grouped}
}

// WithGroup returns a Handler whose next opens a group; the context's
// attributes then go inside it.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), named: h.named, grouped: true}
}
