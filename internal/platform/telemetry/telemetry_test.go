package telemetry_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/envconfig"
	"github.com/oncepay/oncepay/internal/platform/telemetry"
)

func read(vars map[string]string) (telemetry.Config, error) {
	env := envconfig.New(func(name string) string { return vars[name] })
	cfg := telemetry.ReadConfig(env, "oncepay-test")
	return cfg, env.Err()
}

func TestReadConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		vars     map[string]string
		endpoint string
		service  string
	}{
		{name: "unset is off", service: "oncepay-test"},
		{name: "the OTLP endpoint gets the traces path", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
			endpoint: "http://collector:4318/v1/traces", service: "oncepay-test"},
		{name: "the traces endpoint is used as given", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/ingest"}, endpoint: "https://traces.example/ingest", service: "oncepay-test"},
		{name: "a service name of the deployment's", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SERVICE_NAME": "payments-eu"},
			endpoint: "http://c:4318/v1/traces", service: "payments-eu"},
		{name: "no exporter is off", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"},
			service: "oncepay-test"},
		{name: "a disabled SDK is off", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"},
			service: "oncepay-test"},
	} {
		cfg, err := read(c.vars)
		require.NoError(t, err, c.name)
		require.Equal(t, telemetry.Config{Endpoint: c.endpoint, ServiceName: c.service}, cfg, c.name)
	}

	for name, value := range map[string]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL":        "grpc",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "collector:4318",
		"OTEL_TRACES_EXPORTER":               "zipkin",
	} {
		_, err := read(map[string]string{name: value})
		require.ErrorContains(t, err, name, "%s=%s", name, value)
	}
}

// TestOffCostsNothing: with no endpoint every wrapper hands back what it
// was given, so nothing is traced, allocated or called per request.
func TestOffCostsNothing(t *testing.T) {
	t.Parallel()
	tracing, err := telemetry.Start(context.Background(), telemetry.Config{ServiceName: "oncepay-test"})
	require.NoError(t, err)
	require.False(t, tracing.On())
	handler := http.NewServeMux()
	require.Same(t, handler, tracing.Handler(handler))
	transport := &http.Transport{}
	require.Same(t, transport, tracing.Transport(transport))
	require.Nil(t, tracing.QueryTracer())
	require.Nil(t, tracing.RiverMiddleware())
	tracing.Stop(nil)
}
