package payments

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

func TestAttemptStarter(t *testing.T) {
	t.Parallel()

	// Charges starting at once are started in fewer statements than
	// charges, and each gets its own payment and attempt clock.
	t.Run("ConcurrentStartsAreGrouped", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		traced, log := pgtest.TracedPool(t, b.dbURL)
		s := newAttemptStarter(traced)
		const n = 40
		var charges []*finishing
		for range n {
			charges = append(charges, b.charge(t))
		}
		log.Take()
		start := make(chan struct{})
		var wg sync.WaitGroup
		got := make([]Payment, n)
		oks := make([]bool, n)
		errs := make([]error, n)
		for i, f := range charges {
			wg.Go(func() {
				<-start
				got[i], _, oks[i], errs[i] = s.start(b.ctx, b.tenant, f.p.ID)
			})
		}
		close(start)
		wg.Wait()
		for i, f := range charges {
			require.NoError(t, errs[i])
			require.True(t, oks[i])
			require.Equal(t, f.p.ID, got[i].ID)
			require.NotNil(t, got[i].FirstProviderAttemptAt)
		}
		statements := 0
		for _, sql := range log.Take() {
			if strings.Contains(sql, "UPDATE payments SET first_provider_attempt_at") {
				statements++
			}
		}
		require.Less(t, statements, n, "grouped")
		require.Zero(t, b.count(t, `SELECT count(*) FROM payments WHERE tenant_id = $1 AND first_provider_attempt_at IS NULL`, b.tenant))
	})

	// In a group, a payment no longer in flight is not started and is
	// answered as it is; a payment whose row another transaction holds
	// past the group's lock wait makes the group's charges start alone:
	// each is started, that one once its row is free.
	t.Run("WhatAGroupCannotStartIsStartedAlone", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		s := newAttemptStarter(b.pool)
		settled, held, free := b.charge(t), b.charge(t), b.charge(t)
		_, err := b.pool.Exec(b.ctx, `UPDATE payments SET status = 'succeeded' WHERE id = $1`, settled.p.ID)
		require.NoError(t, err)
		holder, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = holder.Exec(b.ctx, `SELECT FROM payments WHERE id = $1 FOR UPDATE`, held.p.ID)
		require.NoError(t, err)
		go func() {
			time.Sleep(time.Second)
			_ = holder.Rollback(context.Background())
		}()

		requests := make([]*request[*starting], 0, 3)
		for _, f := range []*finishing{settled, held, free} {
			requests = append(requests, &request[*starting]{item: &starting{ctx: b.ctx, tenantID: b.tenant, paymentID: f.p.ID}, done: make(chan struct{})})
		}
		began := time.Now()
		s.groups.writeGroup(requests)
		for _, r := range requests {
			<-r.done
			require.NoError(t, r.err)
		}
		require.GreaterOrEqual(t, time.Since(began), time.Second, "the held payment's charge waited for its row")
		require.False(t, requests[0].item.ok)
		require.Equal(t, StatusSucceeded, requests[0].item.payment.Status)
		require.True(t, requests[1].item.ok)
		require.True(t, requests[2].item.ok)
	})
}

func (b recorderBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}
