package console_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/console"
	"github.com/oncepay/oncepay/internal/testkit/alertrules"
)

// TestEveryAlertLinksItsRunbookEntry: the alerts page links each rule of
// deploy/alerts.yml to its runbook entry, which the console serves: the
// runbook page has a heading of that id, and no raw HTML from the source.
func TestEveryAlertLinksItsRunbookEntry(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(console.Handler(console.Config{Metrics: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		return string(body)
	}
	alerts, runbook := get(console.Path+"alerts"), get(console.Path+"runbook")
	require.NotContains(t, runbook, "<script")
	rules := alertrules.Load(t, "../..")
	require.NotEmpty(t, rules)
	for _, r := range rules {
		annotation := r.Annotations["runbook"]
		file, anchor, ok := strings.Cut(annotation, "#")
		require.True(t, ok, "rule %s: runbook %q names no entry", r.Alert, annotation)
		require.Equal(t, "docs/operations.md", file, r.Alert)
		require.Contains(t, alerts, `href="`+console.Path+`runbook#`+anchor+`"`, "rule %s is not linked", r.Alert)
		require.Contains(t, runbook, `id="`+anchor+`"`, "rule %s: the runbook has no entry %s", r.Alert, anchor)
	}
}
