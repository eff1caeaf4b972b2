package telemetry_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/devstack"
)

var binRoot string

func TestMain(m *testing.M) {
	bintest.Main(m, &binRoot, "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker",
		"github.com/oncepay/oncepay/tools/stripesim/cmd/stripesim")
}

// span is one exported span, as the receiver read it.
type span struct {
	service, name       string
	traceID, id, parent string
	kind                tracepb.Span_SpanKind
}

// receiver is an OTLP/HTTP collector: it keeps every span it is sent.
type receiver struct {
	mu    sync.Mutex
	spans []span
	bad   []string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		rc.bad = append(rc.bad, fmt.Sprintf("%s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err))
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.Resource.GetAttributes() {
			if a.Key == "service.name" {
				service = a.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				rc.spans = append(rc.spans, span{service: service, name: s.Name, kind: s.Kind,
					traceID: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId)})
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// trace returns the spans of one trace.
func (rc *receiver) trace(traceID string) []span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []span
	for _, s := range rc.spans {
		if s.traceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// find returns the first span of spans that ok accepts.
func find(spans []span, ok func(span) bool) (span, bool) {
	for _, s := range spans {
		if ok(s) {
			return s, true
		}
	}
	return span{}, false
}

// descends reports whether s is below ancestor in spans.
func descends(spans []span, s span, ancestor string) bool {
	byID := map[string]span{}
	for _, x := range spans {
		byID[x.id] = x
	}
	for range len(spans) {
		if s.parent == ancestor {
			return true
		}
		parent, ok := byID[s.parent]
		if !ok {
			return false
		}
		s = parent
	}
	return false
}

// TestOneTraceFromRequestToProviderCall runs the API, the worker and the
// simulator as processes exporting to an in-process OTLP receiver. A
// payment whose request carries a traceparent makes one trace: the API's
// server span under the caller's and its queries, and in the worker, under
// that request, the job's run, its provider call and the queries that
// record the outcome; the worker's log lines for the job name the trace.
func TestOneTraceFromRequestToProviderCall(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	collector := httptest.NewServer(rc)
	t.Cleanup(collector.Close)

	addrs, err := devstack.FreeAddrs(3)
	require.NoError(t, err)
	stack, err := devstack.Start(context.Background(), devstack.Config{
		BinDir: filepath.Join(binRoot, "bin"), StateDir: t.TempDir(), DatabaseURL: pgtest.NewDatabase(t),
		StripeSecretKey: "sk_test_oncepay", StripeAPIBase: "http://" + addrs[2],
		APIAddr: addrs[0], WorkerAdminAddr: addrs[1], APIMetricsAddr: "off",
		Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100"},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range stack.Processes {
				data, _ := os.ReadFile(p.LogPath)
				t.Logf("%s's log:\n%s", p.Name, data)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		assert.NoError(t, stack.Stop(ctx))
	})
	created, err := stack.Tenant("tracing")
	require.NoError(t, err)

	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodPost, stack.APIURL+"/v1/payments",
		strings.NewReader(`{"amount": 1200, "currency": "usd", "payment_method": "pm_card_visa"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+created.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderName, id.New("key"))
	req.Header.Set("Prefer", "wait=10")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)

	var spans []span
	var server, work, call span
	require.Eventually(t, func() bool {
		spans = rc.trace(traceID)
		var okServer, okWork, okCall bool
		server, okServer = find(spans, func(s span) bool {
			return s.service == "oncepay-api" && s.kind == tracepb.Span_SPAN_KIND_SERVER && s.parent == callerSpan
		})
		work, okWork = find(spans, func(s span) bool { return s.service == "oncepay-worker" && s.name == "river.work/charge_payment" })
		call, okCall = find(spans, func(s span) bool {
			return s.service == "oncepay-worker" && s.kind == tracepb.Span_SPAN_KIND_CLIENT && s.name == "POST "+addrs[2]
		})
		return okServer && okWork && okCall
	}, 15*time.Second, 50*time.Millisecond, "the trace lacks a span; it has:\n%v", &spans)

	require.Equal(t, "POST /v1/payments", server.name, "named by the route")
	require.True(t, descends(spans, work, server.id), "the job's run is under the request that inserted it: %v", spans)
	_, queried := find(spans, func(s span) bool {
		return s.service == "oncepay-api" && s.kind == tracepb.Span_SPAN_KIND_CLIENT && descends(spans, s, server.id)
	})
	require.True(t, queried, "the request's queries are in its trace: %v", spans)
	require.True(t, descends(spans, call, work.id), "the provider call is under the job's run: %v", spans)
	// The job's queries: its attempt's start, then its recording, a
	// transaction of its own.
	var queries []string
	for _, s := range spans {
		if s.service == "oncepay-worker" && s.kind == tracepb.Span_SPAN_KIND_CLIENT && s.id != call.id && s.name != "pool.acquire" &&
			s.parent == work.id {
			queries = append(queries, s.name)
		}
	}
	require.Contains(t, queries, "UPDATE", "the attempt's start is under the job's run: %v", spans)
	require.Contains(t, queries, "COMMIT", "the recording is under the job's run: %v", spans)

	worker, ok := findProcess(stack, "worker")
	require.True(t, ok)
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(worker)
		return strings.Contains(string(data), `"trace_id":"`+traceID+`"`)
	}, 5*time.Second, 50*time.Millisecond, "the worker's lines for the job name its trace")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	require.Empty(t, rc.bad)
}

func findProcess(stack *devstack.Stack, name string) (string, bool) {
	for _, p := range stack.Processes {
		if p.Name == name {
			return p.LogPath, true
		}
	}
	return "", false
}
