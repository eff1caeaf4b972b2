package payments

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

func TestStartGrouped(t *testing.T) {
	t.Parallel()

	// Charges starting at once are started in fewer statements than
	// charges, and each gets its own payment and attempt clock.
	t.Run("ConcurrentStartsAreGrouped", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		traced, log := pgtest.TracedPool(t, b.dbURL)
		s := operation.NewStartGrouped[Payment](traced, paymentsTable, time.Second, operation.GroupFallback{}, nil)
		const n = 40
		var charges []*answer
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
				got[i], oks[i], errs[i] = s.Start(b.ctx, b.tenant, f.Op.ID)
			})
		}
		close(start)
		wg.Wait()
		for i, f := range charges {
			require.NoError(t, errs[i])
			require.True(t, oks[i])
			require.Equal(t, f.Op.ID, got[i].ID)
			require.NotNil(t, got[i].FirstProviderAttemptAt)
			require.Equal(t, got[i].LastProviderAttemptAt.Add(time.Second), *got[i].ProviderAttemptDeadline,
				"the attempt's deadline, its call timeout on, is stamped with it")
		}
		statements := 0
		for _, sql := range log.Take() {
			if strings.Contains(sql, "UPDATE payments SET first_provider_attempt_at") {
				statements++
			}
		}
		require.Less(t, statements, n, "grouped")
		require.Zero(t, b.count(t, `SELECT count(*) FROM payments WHERE tenant_id = $1 AND provider_attempt_deadline IS NULL`, b.tenant))
		require.Zero(t, b.count(t, `SELECT count(*) FROM payments WHERE tenant_id = $1 AND first_provider_attempt_at IS NULL`, b.tenant))
	})

	// In a group, a payment no longer in flight is not started: its charge
	// starts alone and reads it as it is. A payment whose row another
	// transaction holds fails the group within its lock wait, not the
	// holder's time: every charge of it then starts alone, and the
	// operator is told once, by a warning and a count.
	t.Run("WhatAGroupCannotStartIsStartedAlone", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		var logs bytes.Buffer
		var fellBack []string
		s := operation.NewStartGrouped[Payment](b.pool, paymentsTable, time.Second, operation.GroupFallback{
			Kind: payment{}.Name(), Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			FellBack: func(step, kind string) { fellBack = append(fellBack, step+" "+kind) },
		}, nil)
		ref := func(f *answer) operation.Ref { return operation.Ref{TenantID: b.tenant, ID: f.Op.ID} }
		settled, free := b.charge(t), b.charge(t)
		_, err := b.pool.Exec(b.ctx, `UPDATE payments SET status = 'succeeded' WHERE id = $1`, settled.Op.ID)
		require.NoError(t, err)
		started, err := s.StartGroup(b.ctx, []operation.Ref{ref(settled), ref(free)})
		require.NoError(t, err)
		require.Contains(t, started, ref(free))
		require.NotContains(t, started, ref(settled))
		p, ok, err := s.Start(b.ctx, b.tenant, settled.Op.ID)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, StatusSucceeded, p.Status)
		require.Empty(t, fellBack, "a payment no longer in flight is no failure of its group")

		held, other := b.charge(t), b.charge(t)
		holder, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = holder.Exec(b.ctx, `SELECT FROM payments WHERE id = $1 FOR UPDATE`, held.Op.ID)
		require.NoError(t, err)
		began := time.Now()
		_, err = s.StartGroup(b.ctx, []operation.Ref{ref(held), ref(other)})
		require.Error(t, err)
		require.Less(t, time.Since(began), 5*time.Second, "the group waited past its lock wait")
		require.Equal(t, []string{"start payment"}, fellBack)
		var warning struct{ Level, Msg, Kind, Step, Cause string }
		require.NoError(t, json.Unmarshal(logs.Bytes(), &warning), "one warning for the group")
		require.Equal(t, "WARN", warning.Level)
		require.Contains(t, warning.Msg, "starting each alone")
		require.Equal(t, "payment", warning.Kind)
		require.Equal(t, "start", warning.Step)
		require.Contains(t, warning.Cause, "lock timeout")
		_, ok, err = s.Start(b.ctx, b.tenant, other.Op.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, holder.Rollback(b.ctx))
		_, ok, err = s.Start(b.ctx, b.tenant, held.Op.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Len(t, fellBack, 1, "each alone is no group: nothing more to tell")
	})

	// An attempt's deadline only moves later: a start that commits after
	// another with a later deadline (a delayed group committing after its
	// charge started alone, or a worker with a shorter call timeout) keeps
	// the later bound, so no one proves "nothing in flight" too soon.
	t.Run("ADeadlineNeverMovesEarlier", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		f := b.charge(t)
		long, ok, err := operation.StartEach[Payment]{Pool: b.pool, Table: paymentsTable, CallTimeout: time.Hour}.Start(b.ctx, b.tenant, f.Op.ID)
		require.NoError(t, err)
		require.True(t, ok)
		short, ok, err := operation.StartEach[Payment]{Pool: b.pool, Table: paymentsTable, CallTimeout: time.Second}.Start(b.ctx, b.tenant, f.Op.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, *long.ProviderAttemptDeadline, *short.ProviderAttemptDeadline, "the hour's bound stands")
		require.False(t, short.LastProviderAttemptAt.Before(*long.LastProviderAttemptAt))
		require.Equal(t, *long.FirstProviderAttemptAt, *short.FirstProviderAttemptAt)
	})
}

func (b recorderBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}
