package clientcheck_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// Example creates a payment under a key the caller chose (and stored, so a
// crash can be followed by the same call), sends the same operation again,
// and then, by mistake, another request under that key.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.SharedDatabaseURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	api, stop := apitest.StartExample(pool)
	defer stop()

	c := client.New(api.URL, api.Tenant.APIKey, client.WithMaxAttempts(4))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	order := client.PaymentParams{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa",
		Metadata: map[string]string{"order_id": "A-17"}}
	key := client.WithIdempotencyKey("order-A-17-payment-1")

	p, res, err := c.CreatePayment(ctx, order, key)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.StatusCode, p.Status, p.Amount, p.Currency, "replayed:", res.Replayed)

	again, res, err := c.CreatePayment(ctx, order, key)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.StatusCode, "same payment:", again.ID == p.ID, "replayed:", res.Replayed)

	order.Amount = 2500
	_, res, err = c.CreatePayment(ctx, order, key)
	var pe *client.ProblemError
	if errors.As(err, &pe) {
		fmt.Println(pe.Status, pe.Slug(), "attempts:", res.Attempts)
	}
	// Output:
	// 202 processing 2000 usd replayed: false
	// 202 same payment: true replayed: true
	// 422 idempotency-key-mismatch attempts: 1
}

// ExampleIsDeclined shows what a caller does with the answers that are not
// retried.
func Example_declined() {
	c := client.New("https://pay.example.com", "opk_…")
	_, res, err := c.CreatePayment(context.Background(), client.PaymentParams{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa"},
		client.WithWait(10*time.Second))
	var pe *client.ProblemError
	switch {
	case err == nil:
		fmt.Println("accepted or charged; key", res.IdempotencyKey)
	case client.IsDeclined(err) && errors.As(err, &pe):
		fmt.Println("declined:", pe.DeclineCode, "payment", pe.PaymentID)
	case errors.As(err, &pe) && pe.Slug() == client.ProblemInvalidRequest:
		for _, f := range pe.Errors {
			fmt.Println(f.Field, f.Detail)
		}
	default:
		// Retries ran out, or the context ended: the outcome is unknown.
		// Store res.IdempotencyKey and call again later with it.
		fmt.Println("unknown outcome; retry later with key", res.IdempotencyKey, err)
	}
}
