package payments

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// BenchmarkIdempotencyOverhead measures what the idempotency layer costs a
// payment, as ratios to a baseline measured in the same run (absolute times
// on a shared machine mean little):
//
//   - baseline: one transaction that inserts the payment and its job, the
//     write set of a POST without idempotency;
//   - create: the same through Store.Run (reserve, insert, job, stored 202);
//   - replay: a retry of an existing key, through the transaction (one
//     statement that finds the row).
func BenchmarkIdempotencyOverhead(b *testing.B) {
	ctx := context.Background()
	pool, _ := pgtest.NewPool(b)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	inserter, err := outbox.NewInsertOnly(pool, logger)
	if err != nil {
		b.Fatal(err)
	}
	svc := &Service{Deps: operation.Deps{DB: pool, Keys: idempotency.NewStore(idempotency.Config{}), Outbox: outbox.New(inserter), Logger: logger}}
	tenantID := id.New("ten")
	if _, err := pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, $1)", tenantID); err != nil {
		b.Fatal(err)
	}
	req := CreateRequest{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa", Metadata: map[string]string{"order_id": "A-17"}}
	fingerprint, err := idempotency.Fingerprint("POST", "/v1/payments", req)
	if err != nil {
		b.Fatal(err)
	}
	request := func(key string) idempotency.Request {
		return idempotency.Request{TenantID: tenantID, Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: fingerprint}
	}
	create := func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
		return svc.create(ctx, tx, a, req)
	}

	// Sub-benchmarks run in order, so baseline is known when the others
	// report their ratio to it.
	var baselinePerOp float64
	perOp := func(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }
	report := func(b *testing.B) {
		b.ReportMetric(perOp(b)/baselinePerOp, "x-baseline")
	}

	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				p := newPayment(idempotency.Request{TenantID: tenantID, Key: id.New("key")}, req)
				p.CreatedAt, p.UpdatedAt = time.Now(), time.Now()
				if _, err := svc.Outbox.InsertTx(ctx, tx, args{TenantID: tenantID, ID: p.ID}); err != nil {
					return err
				}
				batch := &pgx.Batch{}
				queueInsertPayment(batch, p)
				return tx.SendBatch(ctx, batch).Close()
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		baselinePerOp = perOp(b)
	})
	b.Run("create", func(b *testing.B) {
		for b.Loop() {
			if _, err := svc.Keys.Run(ctx, pool, request(id.New("key")), create); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	replayKey := id.New("key")
	if _, err := svc.Keys.Run(ctx, pool, request(replayKey), create); err != nil {
		b.Fatal(err)
	}
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			res, err := svc.Keys.Run(ctx, pool, request(replayKey), create)
			if err != nil || res.Kind != idempotency.Replay {
				b.Fatal(res.Kind, err)
			}
		}
		report(b)
	})
}
