package console_test

import (
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/console"
	"github.com/oncepay/oncepay/internal/testkit/alertrules"
)

// TestEveryAlertLinksItsRunbookEntry: every alert on the served alerts
// page, the rate rules' included, is an anchor to its rule's runbook
// entry, and the anchor's target resolves: fetched from where the page is
// served, it answers 200 with a heading of the fragment's id (and no raw
// HTML from the source).
func TestEveryAlertLinksItsRunbookEntry(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(console.Handler(console.Config{Metrics: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	get := func(u *url.URL) string {
		t.Helper()
		resp, err := http.Get(u.String())
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", u, body)
		return string(body)
	}
	pageURL, err := url.Parse(srv.URL + console.Path + "alerts")
	require.NoError(t, err)
	alerts := get(pageURL)
	rows := regexp.MustCompile(`(?s)<tr[^>]*><td>(Oncepay\w+)</td>(.*?)</tr>`).FindAllStringSubmatch(alerts, -1)
	links := map[string]string{}
	for _, row := range rows {
		href := regexp.MustCompile(`<a [^>]*href="([^"]+)"`).FindStringSubmatch(row[2])
		require.NotNil(t, href, "alert %s is no link: %s", row[1], row[0])
		links[row[1]] = html.UnescapeString(href[1])
	}
	rules := alertrules.Load(t, "../..")
	require.NotEmpty(t, rules)
	require.Len(t, links, len(rules), "one row a rule")
	for _, r := range rules {
		_, anchor, ok := strings.Cut(r.Annotations["runbook"], "#")
		require.True(t, ok, "rule %s: runbook %q names no entry", r.Alert, r.Annotations["runbook"])
		href, ok := links[r.Alert]
		require.True(t, ok, "rule %s is not on the page", r.Alert)
		target, err := pageURL.Parse(href)
		require.NoError(t, err)
		require.Equal(t, anchor, target.Fragment, "rule %s links %s", r.Alert, href)
		entry := get(target)
		require.NotContains(t, entry, "<script")
		require.Contains(t, entry, `id="`+anchor+`"`, "rule %s: %s has no entry %s", r.Alert, target, anchor)
	}
}
