package console

import (
	"cmp"
	"context"
	"slices"

	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
)

// Operation is one provider operation of a payment: its charge, a refund, a
// capture or a cancel, as an operator sees it.
type Operation = operation.Summary

// OperationsOf lists p's operations, from every kind of registry: its
// charge first, then the rest as they were made.
func OperationsOf(ctx context.Context, db operation.Querier, registry operation.Kinds, p payments.Payment) ([]Operation, error) {
	var ops []Operation
	for _, kind := range registry {
		list, err := kind.OfPayment(ctx, db, p.TenantID, p.ID)
		if err != nil {
			return nil, err
		}
		ops = append(ops, list...)
	}
	slices.SortStableFunc(ops, func(x, y Operation) int {
		// The charge heads the list: its payment came first.
		if first := cmp.Compare(boolInt(x.ID != p.ID), boolInt(y.ID != p.ID)); first != 0 {
			return first
		}
		return x.CreatedAt.Compare(y.CreatedAt)
	})
	return ops, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// AddOperationJobs adds to d's jobs (the charge's) those of its payment's
// other operations (ops from OperationsOf), in the order River made them:
// every attempt of a refund, a capture or a cancel shows under its
// payment.
func AddOperationJobs(ctx context.Context, db operation.Querier, d *payments.Detail, ops []Operation) error {
	var of []river.JobArgs
	for _, op := range ops {
		if op.Job != nil && op.ID != d.Payment.ID {
			of = append(of, op.Job)
		}
	}
	jobs, err := operation.JobsOf(ctx, db, of...)
	if err != nil {
		return err
	}
	d.Jobs = append(d.Jobs, jobs...)
	slices.SortFunc(d.Jobs, func(a, b operation.Job) int { return cmp.Compare(a.ID, b.ID) })
	return nil
}
