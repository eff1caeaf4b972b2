package idempotency_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// ExampleStore_Run shows an operation guarded by a key: the first request
// runs it, a retry replays its stored response, and a different request
// under the same key is refused.
func ExampleStore_Run() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.SharedDatabaseURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	tenantID := id.New("ten")
	if _, err := pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, 'example')", tenantID); err != nil {
		panic(err)
	}

	store := idempotency.NewStore(idempotency.Config{})
	createOrder := func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
		fmt.Println("creating the order")
		return idempotency.Outcome{
			Status:     idempotency.StatusCompleted,
			ResourceID: "order_1",
			Response:   idempotency.Response{StatusCode: 201, Body: []byte(`{"id":"order_1"}`)},
		}, nil
	}
	request := func(body any) idempotency.Request {
		fp, _ := idempotency.Fingerprint("POST", "/v1/orders", body)
		return idempotency.Request{TenantID: tenantID, Key: "3f1c2a9e-order-attempt", Method: "POST", Path: "/v1/orders", Fingerprint: fp}
	}

	for _, body := range []map[string]int{{"qty": 1}, {"qty": 1}, {"qty": 2}} {
		res, err := store.Run(ctx, pool, request(body), createOrder)
		if err != nil {
			panic(err)
		}
		switch res.Kind {
		case idempotency.Execute, idempotency.Replay:
			fmt.Println(res.Kind, res.Record.Response.StatusCode, string(res.Record.Response.Body))
		default:
			fmt.Println(res.Kind)
		}
	}
	// Output:
	// creating the order
	// execute 201 {"id":"order_1"}
	// replay 201 {"id":"order_1"}
	// mismatch
}
