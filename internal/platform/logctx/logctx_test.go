package logctx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/logctx"
)

func TestContextAttributesReachEveryLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(logctx.NewHandler(slog.NewJSONHandler(&buf, nil))).With(slog.String("service", "api"))
	parent := logctx.With(context.Background(), slog.String("request_id", "req-1"))
	child := logctx.With(parent, slog.Int64("job_id", 7))
	_ = logctx.With(parent, slog.String("sibling", "x")) // must not leak into child

	line := func(log func()) map[string]any {
		buf.Reset()
		log()
		var m map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &m), buf.String())
		return m
	}
	got := line(func() { logger.InfoContext(child, "working", slog.String("payment_id", "pay_1")) })
	require.Equal(t, "req-1", got["request_id"])
	require.Equal(t, 7.0, got["job_id"])
	require.Equal(t, "pay_1", got["payment_id"])
	require.Equal(t, "api", got["service"])
	require.NotContains(t, got, "sibling")

	got = line(func() { logger.InfoContext(parent, "named", slog.String("request_id", "own")) })
	require.Equal(t, "own", got["request_id"], "a line that names the key keeps its value")
	require.Equal(t, 1, bytes.Count(buf.Bytes(), []byte(`"request_id"`)), "and has it once: %s", buf.String())

	got = line(func() { logger.With(slog.Int64("job_id", 9)).InfoContext(child, "named by With") })
	require.Equal(t, 9.0, got["job_id"], "a key the logger was given keeps its value")
	require.Equal(t, 1, bytes.Count(buf.Bytes(), []byte(`"job_id"`)), "and is there once: %s", buf.String())
	require.Equal(t, "req-1", got["request_id"])

	got = line(func() { logger.Info("no context") })
	require.NotContains(t, got, "request_id")
}
