package console

import (
	"fmt"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// check is an alert rule of deploy/alerts.yml whose expression compares
// gauges the worker exports with a threshold: the console evaluates it on
// the worker's own metrics, now. Rules over rates need Prometheus's history
// and are listed as such. TestChecksAreTheAlertRules keeps the two in step.
type check struct {
	Alert string
	// Metric is the gauge; Match, if set, keeps the series with those
	// labels; Sum adds the series before comparing, else each series is
	// compared alone.
	Metric string
	Match  map[string]string
	Sum    bool
	// Op is ">" or "==".
	Op        string
	Threshold float64
	// Runbook is the rule's runbook annotation.
	Runbook string
}

// Expr is the rule's expression as deploy/alerts.yml writes it.
func (c check) Expr() string {
	sel := c.Metric
	if len(c.Match) > 0 {
		var parts []string
		for k, v := range c.Match {
			parts = append(parts, fmt.Sprintf("%s=%q", k, v))
		}
		sort.Strings(parts)
		sel += "{" + strings.Join(parts, ",") + "}"
	}
	if c.Sum {
		sel = "sum(" + sel + ")"
	}
	return fmt.Sprintf("%s %s %s", sel, c.Op, formatNumber(c.Threshold))
}

var checks = []check{
	{Alert: "OncepayOperationsAwaitingOperator", Metric: "oncepay_operations_awaiting_operator", Op: ">", Threshold: 0,
		Runbook: "docs/operations.md#left-to-an-operator"},
	{Alert: "OncepayReconciliationBacklog", Metric: "oncepay_operations", Match: map[string]string{"status": "requires_reconciliation"},
		Op: ">", Threshold: 20, Runbook: "docs/operations.md#an-operation-awaits-reconciliation"},
	{Alert: "OncepayChargeBacklog", Metric: "oncepay_river_oldest_available_job_age_seconds", Match: map[string]string{"queue": "payments"},
		Op: ">", Threshold: 120, Runbook: "docs/operations.md#charges-are-not-being-worked"},
	{Alert: "OncepayLedgerFindings", Metric: "oncepay_ledger_findings_open", Sum: true, Op: ">", Threshold: 0,
		Runbook: "docs/operations.md#a-ledger-finding"},
	{Alert: "OncepayDatabaseUnreadable", Metric: "oncepay_database_scrape_ok", Op: "==", Threshold: 0,
		Runbook: "docs/operations.md#is-it-up"},
	{Alert: "OncepayWebhooksBacklog", Metric: "oncepay_webhook_events_unprocessed", Op: ">", Threshold: 100,
		Runbook: "docs/operations.md#webhooks-are-not-processed"},
	{Alert: "OncepayWebhooksAwaitingCharge", Metric: "oncepay_webhook_events_oldest_awaiting_charge_seconds", Op: ">", Threshold: 300,
		Runbook: "docs/operations.md#webhooks-are-not-processed"},
}

// rateRule is a rule only Prometheus can evaluate, with its runbook
// annotation.
type rateRule struct{ Alert, Runbook string }

// rateRules are the rules over rates, listed with their runbooks.
var rateRules = []rateRule{
	{"OncepayProviderFailing", "docs/operations.md#the-provider-is-failing"},
	{"OncepayAPIServerErrors", "docs/operations.md#the-api-answers-5xx"},
	{"OncepayJobsLostBySweeper", "docs/operations.md#the-sweeper-handed-operations-to-reconciliation"},
	{"OncepayGroupsFallingBack", "docs/operations.md#answers-recorded-alone-not-in-their-group"},
}

// Alert is one rule as the alerts page shows it.
type Alert struct {
	Name, Expr, Runbook string
	// Firing lists the series over the threshold now ("operation=payment:
	// 3"); empty when the rule holds.
	Firing []string
	// Prometheus is set for a rule over rates, evaluated only there.
	Prometheus bool
}

// evaluate checks every gauge rule against families. The rule's "for"
// duration is Prometheus's: here a condition that holds now is shown.
func evaluate(families []*dto.MetricFamily) []Alert {
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	var out []Alert
	for _, c := range checks {
		a := Alert{Name: c.Alert, Expr: c.Expr(), Runbook: c.Runbook}
		var sum float64
		for _, m := range byName[c.Metric].GetMetric() {
			labels := labelsOf(m)
			if !matches(labels, c.Match) {
				continue
			}
			v := m.GetGauge().GetValue()
			if c.Sum {
				sum += v
				continue
			}
			if c.over(v) {
				a.Firing = append(a.Firing, seriesName(labels, c.Match)+formatNumber(v))
			}
		}
		if c.Sum && c.over(sum) {
			a.Firing = append(a.Firing, formatNumber(sum))
		}
		out = append(out, a)
	}
	for _, r := range rateRules {
		out = append(out, Alert{Name: r.Alert, Runbook: r.Runbook, Prometheus: true})
	}
	return out
}

func (c check) over(v float64) bool {
	if c.Op == "==" {
		return v == c.Threshold
	}
	return v > c.Threshold
}

func labelsOf(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// seriesName names a series by the labels the rule does not fix.
func seriesName(labels, fixed map[string]string) string {
	var parts []string
	for k, v := range labels {
		if _, ok := fixed[k]; !ok {
			parts = append(parts, k+"="+v)
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ",") + ": "
}

func formatNumber(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}
