package console

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/alertrules"
)

// TestChecksAreTheAlertRules: every rule of deploy/alerts.yml is either a
// check the console evaluates, with the rule's very expression and
// runbook, or a rate rule it names as Prometheus's; a rule changed in one
// place and not the other fails here.
func TestChecksAreTheAlertRules(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, r := range alertrules.Load(t, "../..") {
		seen[r.Alert] = true
		i := slices.IndexFunc(checks, func(c check) bool { return c.Alert == r.Alert })
		if i < 0 {
			j := slices.IndexFunc(rateRules, func(rr rateRule) bool { return rr.Alert == r.Alert })
			require.GreaterOrEqual(t, j, 0, "rule %s is neither a console check nor a rate rule", r.Alert)
			require.Regexp(t, `\b(rate|increase)\(`, r.Expr, "rule %s is listed as a rate rule", r.Alert)
			require.Equal(t, r.Annotations["runbook"], rateRules[j].Runbook, "rule %s", r.Alert)
			continue
		}
		require.Equal(t, strings.TrimSpace(r.Expr), checks[i].Expr(), "rule %s", r.Alert)
		require.Equal(t, r.Annotations["runbook"], checks[i].Runbook, "rule %s", r.Alert)
	}
	for _, c := range checks {
		require.True(t, seen[c.Alert], "console check %s is no rule of deploy/alerts.yml", c.Alert)
	}
	for _, r := range rateRules {
		require.True(t, seen[r.Alert], "rate rule %s is no rule of deploy/alerts.yml", r.Alert)
	}
}

// TestEvaluate: a gauge over its threshold holds, per series or summed as
// the rule says; one at or under it is clear; series the rule's labels do
// not match are left out.
func TestEvaluate(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	awaiting := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "oncepay_operations_awaiting_operator"}, []string{"operation"})
	awaiting.WithLabelValues("payment").Set(0)
	awaiting.WithLabelValues("refund").Set(2)
	operations := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "oncepay_operations"}, []string{"operation", "status"})
	operations.WithLabelValues("payment", "succeeded").Set(500)
	operations.WithLabelValues("payment", "requires_reconciliation").Set(20)
	findings := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "oncepay_ledger_findings_open"}, []string{"kind"})
	findings.WithLabelValues("unknown_intent").Set(1)
	findings.WithLabelValues("missing_intent").Set(2)
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "oncepay_database_scrape_ok"})
	up.Set(1)
	oldestAwaiting := prometheus.NewGauge(prometheus.GaugeOpts{Name: "oncepay_webhook_events_oldest_awaiting_charge_seconds"})
	oldestAwaiting.Set(400)
	reg.MustRegister(awaiting, operations, findings, up, oldestAwaiting)
	families, err := reg.Gather()
	require.NoError(t, err)

	got := map[string][]string{}
	for _, a := range evaluate(families) {
		if !a.Prometheus {
			got[a.Name] = a.Firing
		}
	}
	require.Equal(t, map[string][]string{
		"OncepayOperationsAwaitingOperator": {"operation=refund: 2"},
		"OncepayReconciliationBacklog":      nil, // 20 is not over 20; succeeded is not matched
		"OncepayChargeBacklog":              nil, // no series: nothing waits
		"OncepayLedgerFindings":             {"3"},
		"OncepayDatabaseUnreadable":         nil,
		"OncepayWebhooksBacklog":            nil,
		"OncepayWebhooksAwaitingCharge":     {"400"},
	}, got)
}
