package metrics

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// databaseQuery is one gauge family read at scrape time: its query returns
// one row per series, the label values first and the value last.
type databaseQuery struct {
	desc *prometheus.Desc
	sql  string
}

// database reads the state of the books at each scrape. Only the worker
// registers it, so that a fleet exports each gauge once, not once per API
// process; its queries are grouped counts over tables that the lifecycle
// jobs keep small (finished jobs and keys are pruned and reaped).
type database struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	up      *prometheus.Desc
	queries []databaseQuery
}

// OperationTable is where one operation kind's rows are: Table, narrowed
// by Scope (a condition) where kinds share a table.
type OperationTable struct{ Operation, Table, Scope string }

// RegisterDatabase adds the gauges read from the database to m, with the
// operations' gauges over every kind of operations.
func (m *Metrics) RegisterDatabase(pool *pgxpool.Pool, operations []OperationTable) {
	var byStatus, awaiting []string
	for _, op := range operations {
		where := "TRUE"
		if op.Scope != "" {
			where = op.Scope
		}
		byStatus = append(byStatus, fmt.Sprintf(`SELECT %s, status, count(*) FROM %s WHERE %s GROUP BY status`,
			quoteLiteral(op.Operation), op.Table, where))
		awaiting = append(awaiting, fmt.Sprintf(`SELECT %s, count(*) FROM %s WHERE %s AND status = 'requires_reconciliation' AND reconcile_after IS NULL`,
			quoteLiteral(op.Operation), op.Table, where))
	}
	gauge := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	m.registry.MustRegister(&database{
		pool:    pool,
		timeout: 2 * time.Second,
		up:      gauge("oncepay_database_scrape_ok", "1 if the last scrape read every gauge from the database, else 0."),
		queries: []databaseQuery{
			{gauge("oncepay_payments", "Payments by status.", "status"),
				`SELECT status, count(*) FROM payments GROUP BY status`},
			{gauge("oncepay_payments_awaiting_operator", "Payments the reconciler gave up on (requires_reconciliation, no next look)."),
				`SELECT count(*) FROM payments WHERE status = 'requires_reconciliation' AND reconcile_after IS NULL`},
			{gauge("oncepay_operations", "Provider operations by operation (payment, refund, capture, cancel, payout) and status.", "operation", "status"),
				strings.Join(byStatus, "\nUNION ALL ")},
			{gauge("oncepay_operations_awaiting_operator", "Operations the reconciler gave up on (requires_reconciliation, no next look), by operation.", "operation"),
				strings.Join(awaiting, "\nUNION ALL ")},
			{gauge("oncepay_idempotency_keys", "Idempotency keys by status (expired: tombstones).", "status"),
				`SELECT status, count(*) FROM idempotency_keys GROUP BY status`},
			{gauge("oncepay_river_jobs", "River jobs by queue, kind and state.", "queue", "kind", "state"),
				`SELECT queue, kind, state::text, count(*) FROM river_job GROUP BY 1, 2, 3`},
			{gauge("oncepay_river_oldest_available_job_age_seconds", "Age of the oldest job waiting to run, by queue: the backlog.", "queue"),
				`SELECT queue, extract(epoch FROM now() - min(scheduled_at))::float8 FROM river_job WHERE state = 'available' GROUP BY queue`},
			{gauge("oncepay_ledger_findings_open", "Unresolved disagreements with the provider, by kind.", "kind"),
				`SELECT kind, count(*) FROM ledger_findings WHERE resolved_at IS NULL GROUP BY kind`},
			// An event awaiting its payment's charge (result awaiting_charge)
			// waits by design, for seconds: counted apart, so that the
			// backlog alert reads only events waiting for their job.
			{gauge("oncepay_webhook_events_unprocessed", "Provider events stored, not yet processed, with their job."),
				`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL AND result IS DISTINCT FROM 'awaiting_charge'`},
			{gauge("oncepay_webhook_events_awaiting_charge", "Provider events stored while their payment's charge had yet to record the provider's answer."),
				`SELECT count(*) FROM webhook_events WHERE processed_at IS NULL AND result = 'awaiting_charge'`},
			// Past the await limit (a minute, or twice a charge attempt's
			// bound) only while no worker runs the sweep that ends the wait.
			{gauge("oncepay_webhook_events_oldest_awaiting_charge_seconds", "Age of the oldest provider event awaiting its payment's charge."),
				`SELECT coalesce(extract(epoch FROM now() - min(received_at)), 0)::float8 FROM webhook_events
				WHERE processed_at IS NULL AND result = 'awaiting_charge'`},
		},
	})
}

func (d *database) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.up
	for _, q := range d.queries {
		ch <- q.desc
	}
}

func (d *database) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	ok := 1.0
	for _, q := range d.queries {
		if err := d.collect(ctx, q, ch); err != nil {
			ok = 0
		}
	}
	ch <- prometheus.MustNewConstMetric(d.up, prometheus.GaugeValue, ok)
}

func (d *database) collect(ctx context.Context, q databaseQuery, ch chan<- prometheus.Metric) error {
	rows, err := d.pool.Query(ctx, q.sql)
	if err != nil {
		return err
	}
	metrics, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (prometheus.Metric, error) {
		values, err := row.Values()
		if err != nil {
			return nil, err
		}
		labels := make([]string, 0, len(values)-1)
		for _, v := range values[:len(values)-1] {
			s, _ := v.(string)
			labels = append(labels, s)
		}
		return prometheus.NewConstMetric(q.desc, prometheus.GaugeValue, number(values[len(values)-1]), labels...)
	})
	if err != nil {
		return err
	}
	for _, metric := range metrics {
		ch <- metric
	}
	return nil
}

// number reads a count (int64) or a float8 as a float.
func number(v any) float64 {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return 0
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
