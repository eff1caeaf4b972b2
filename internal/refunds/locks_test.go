package refunds_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

// holdRowLocks makes every update of a payment, refund or key hold its row
// lock a while, to widen the windows in which two transactions interleave.
func (b *bundle) holdRowLocks() {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, `
		CREATE FUNCTION hold_row_lock() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.1); RETURN NULL; END $$;
		CREATE TRIGGER hold_payment_lock AFTER UPDATE ON payments FOR EACH ROW EXECUTE FUNCTION hold_row_lock();
		CREATE TRIGGER hold_refund_lock AFTER INSERT OR UPDATE ON refunds FOR EACH ROW EXECUTE FUNCTION hold_row_lock();
		CREATE TRIGGER hold_key_lock AFTER INSERT OR UPDATE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION hold_row_lock();`)
	require.NoError(b.t, err)
}

// TestCreateAndRecordingDoNotDeadlock races a new refund's request (its
// new key inserted first, then the payment locked) against the recording
// of another refund of the same payment (payment, refund, then that
// refund's key). The new key is uncommitted and no recording ever waits
// for it, so the two only queue on the payment's lock.
func TestCreateAndRecordingDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	p := b.succeededPayment(2000)
	b.holdRowLocks()
	for i := range 5 {
		refundID := b.api.Refund(t, p.ID, id.New("key"), `{"amount": 100}`).Body["id"].(string)
		made := b.provider.CreateRefund(b.ctx, refunds.RequestOf(b.refund(refundID), *p.ProviderPaymentIntentID))
		require.Equal(t, provider.Succeeded, made.Kind)

		var wg sync.WaitGroup
		var created apitest.Response
		wg.Add(1)
		go func() {
			defer wg.Done()
			created = b.api.Refund(t, p.ID, id.New("key"), `{"amount": 100}`)
		}()
		_, changed, err := refunds.Settle(b.ctx, b.pool, b.keys, "", made.Refund)
		wg.Wait()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			require.NotEqual(t, "40P01", pgErr.Code, "iteration %d: deadlock", i)
		}
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, http.StatusAccepted, created.Status, "iteration %d: %s", i, created.Raw)
	}
}

// TestPaymentHeldTooLongIs409Busy: a request that cannot get the payment's
// lock within the key's lock wait is told to retry, and nothing is stored.
func TestPaymentHeldTooLongIs409Busy(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	p := b.succeededPayment(2000)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM payments WHERE id = $1 FOR UPDATE`, p.ID)
	require.NoError(t, err)
	key := id.New("key")
	start := time.Now()
	r := b.api.Refund(t, p.ID, key, `{"amount": 100}`)
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, "/docs/problems/payment-busy", r.Body["type"])
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Less(t, time.Since(start), 10*time.Second)
	_, err = b.keys.Get(b.ctx, b.pool, b.api.Tenant.TenantID, key)
	require.ErrorIs(t, err, idempotency.ErrKeyNotFound, "nothing stored")
	require.NoError(t, tx.Rollback(b.ctx))
	require.Equal(t, http.StatusAccepted, b.api.Refund(t, p.ID, key, `{"amount": 100}`).Status)
}

// TestRefusedByTheProviderIs422: the provider refuses a refund (here the
// charge was refunded outside oncepay, so too little remains there): the
// refund is failed, its amount counts as refundable again, and its key
// replays 422 refund-failed.
func TestRefusedByTheProviderIs422(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	p := b.succeededPayment(2000)
	outside := b.provider.CreateRefund(b.ctx, provider.RefundRequest{IdempotencyKey: id.New("rk"), PaymentIntentID: *p.ProviderPaymentIntentID, Amount: 1500})
	require.Equal(t, provider.Succeeded, outside.Kind)

	key, body := id.New("key"), `{"amount": 1000}`
	r := b.api.Refund(t, p.ID, key, body, "Prefer", "wait=10")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, r.Raw)
	require.Equal(t, "/docs/problems/refund-failed", r.Body["type"])
	require.Equal(t, "amount_too_large", r.Body["failure_code"])
	refundID := r.Body["refund_id"].(string)
	ref := b.refund(refundID)
	require.Equal(t, refunds.StatusFailed, ref.Status)
	require.EqualValues(t, 0, b.payment(p.ID).AmountRefunded)

	replay := b.api.Refund(t, p.ID, key, body)
	require.Equal(t, http.StatusUnprocessableEntity, replay.Status)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
	require.Equal(t, r.Raw, replay.Raw)

	// Its 1000 is free again for oncepay (the provider holds the last word
	// on what the charge has left: 500).
	small := b.api.Refund(t, p.ID, id.New("key"), `{"amount": 500}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, small.Status, small.Raw)
}
