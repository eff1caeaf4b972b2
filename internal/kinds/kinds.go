// Package kinds is the registry of operation kinds: the one list the API,
// the worker, the operator's commands, the console and the metrics read.
// A kind a clone adds is its own package, its migration and one line here.
package kinds

import (
	"github.com/oncepay/oncepay/internal/authorizations"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/payouts"
	"github.com/oncepay/oncepay/internal/refunds"
)

// All is every operation kind the service runs. Payments come first: the
// others' timelines are their payment's.
func All() operation.Kinds {
	return operation.Kinds{
		payments.Kind(),
		refunds.Kind(),
		authorizations.CaptureKind(),
		authorizations.CancelKind(),
		payouts.Kind(),
	}
}

// MetricsTables are where the metrics' operation gauges count each kind.
func MetricsTables(ks operation.Kinds) []metrics.OperationTable {
	tables := make([]metrics.OperationTable, len(ks))
	for i, k := range ks {
		t := k.Table()
		tables[i] = metrics.OperationTable{Operation: k.Name(), Table: t.Name, Scope: t.Scope}
	}
	return tables
}
