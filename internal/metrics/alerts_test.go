package metrics_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/testkit/alertrules"
)

// TestAlertRulesNameOurMetrics parses deploy/alerts.yml: every rule is
// complete, and every oncepay_ metric its expression uses is one we export,
// so that a renamed metric cannot silently disarm an alert.
func TestAlertRulesNameOurMetrics(t *testing.T) {
	t.Parallel()
	rules := alertrules.Load(t, "../..")

	m := metrics.New()
	m.RegisterDatabase(nil, nil) // descriptions only: nothing is scraped
	descs := make(chan *prometheus.Desc, 1000)
	m.Registry().Describe(descs)
	close(descs)
	exported := map[string]bool{}
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if match := name.FindStringSubmatch(d.String()); match != nil {
			exported[match[1]] = true
		}
	}
	used := regexp.MustCompile(`\boncepay_[a-z_]+`)
	var alerts []string
	for _, r := range rules {
		alerts = append(alerts, r.Alert)
		require.NotEmpty(t, r.Alert)
		require.NotEmpty(t, strings.TrimSpace(r.Expr), r.Alert)
		require.Contains(t, []string{"page", "ticket"}, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		// tools/doccheck checks that the anchor is a heading of the runbook.
		require.True(t, strings.HasPrefix(r.Annotations["runbook"], "docs/operations.md#"), r.Alert)
		for _, metric := range used.FindAllString(r.Expr, -1) {
			// Every operation kind is watched alike: an alert on one
			// kind's gauge would leave the others unwatched.
			require.NotContains(t, []string{"oncepay_payments", "oncepay_payments_awaiting_operator"}, metric,
				"%s watches payments only; use the gauge of every operation (oncepay_operations…)", r.Alert)
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(metric, "_bucket"), "_count"), "_sum")
			require.True(t, exported[base], "%s uses %s, which oncepay does not export", r.Alert, metric)
		}
	}
	require.False(t, slices.Contains(alerts, ""), "every rule is an alert")
	require.GreaterOrEqual(t, len(alerts), 5)
}
