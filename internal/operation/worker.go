package operation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/fastpath"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// Querier runs queries: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// timings are a worker's clocks, as WorkerConfig sets them.
type timings struct {
	// JobTimeout bounds one attempt; CallTimeout, shorter, the provider
	// call inside it.
	JobTimeout, CallTimeout time.Duration
	// RecordTimeout bounds recording the provider's answer, which runs even
	// past the attempt's deadline.
	RecordTimeout time.Duration
	// KeyMargin: the provider forgets idempotency keys after 24 hours, so an
	// operation first sent longer ago than this is never sent again (it is
	// looked up instead).
	KeyMargin time.Duration
	// PollInterval and MaxPollDuration: a pending provider object is read
	// again every PollInterval, for at most MaxPollDuration from the first
	// attempt.
	PollInterval, MaxPollDuration time.Duration
}

// jobOf is a kind's job arguments: they name the job's operation.
type jobOf interface {
	river.JobArgs
	Of() (tenantID, id string)
}

// providerAnswer is a kind's provider answer: the engine judges it by what it
// proves (provider.Judgement), whatever the object it carries.
type providerAnswer interface{ Judge() provider.Judgement }

// locking is how a kind reads and locks one of its operations: what every
// part of the engine that changes an operation needs of it.
type locking[Op any] interface {
	// Load reads an operation (in a transaction that holds its locks, or
	// not); the table's NotFound when it does not exist.
	Load(ctx context.Context, db Querier, tenantID, id string) (Op, error)
	Entry(op Op) Entry
	// Lock takes the operation's locks in the kind's order, key last.
	Lock(ctx context.Context, tx pgx.Tx, tenantID, id string) error
}

// Attemptable is what a kind supplies to the engine's Worker. A is the
// job's arguments, Op the operation as the kind reads it, O the kind's
// provider answer.
type Attemptable[Op, O any] interface {
	locking[Op]
	// Send calls the provider for op under its derived key, or reads the
	// provider object an earlier attempt found. It may read more of op's
	// context (the payment a refund gives back).
	Send(ctx context.Context, op Op) (O, error)
	// RecordFinal records a final answer: the operation's state and the
	// key's final response. It takes the kind's locks itself, in the
	// kind's order (Rows.Locked, or conditional writes that lock as they
	// go), so that answers recorded together in one transaction lock as
	// each alone would.
	RecordFinal(ctx context.Context, tx pgx.Tx, op Op, out O) error
}

// The engine's worker asks a kind for more only where the kind has more to
// say; each of these is optional.
type (
	// pendingRecorder notes a pending provider object, so that the next
	// attempt reads it instead of sending again (a refund's). A kind whose
	// creation is answered at once has none.
	pendingRecorder[Op, O any] interface {
		RecordPending(ctx context.Context, db Querier, op Op, out O) error
	}
	// abandoner ends an operation that stayed pending past MaxPollDuration
	// when the kind knows nothing more will happen (a customer who never
	// completed authentication: cancel the intent). abandoned is false when
	// it cannot, and the operation goes to the reconciler; otherwise out is
	// the provider's answer to the abandonment, recorded if final and
	// retried if not.
	abandoner[Op, O any] interface {
		Abandon(ctx context.Context, op Op, pending O) (out O, abandoned bool)
	}
)

// worker runs one kind's provider operation as a River job, the way every
// operation must run to happen exactly once at the provider:
//
//   - the attempt clock commits before every call, so a crash cannot lose
//     the bound of the window in which the provider may have acted, nor
//     the age that keeps a call inside the provider's key window;
//   - every attempt sends the same derived key (the kind's Send), so the
//     provider answers a retry with the first execution;
//   - a final answer, the key's final response and the job's completion
//     commit in one transaction;
//   - what retrying cannot settle (a stored 5xx, a key conflict, a key
//     window ending, the last attempt failing for any reason) goes to the
//     reconciler, with the key unknown, in the transaction that completes
//     the job.
type worker[A jobOf, Op operationRow, O providerAnswer] struct {
	river.WorkerDefaults[A]

	pool *pgxpool.Pool
	keys *idempotency.Store
	log  *slog.Logger
	t    timings
	// action names the call in logs ("refund", "capture").
	action string
	table  Table
	kind   Attemptable[Op, O]
	// The seams: StartEach and RecordEach, or their grouped forms.
	starter  attemptStarter[Op]
	recorder answerRecorder[A, Op, O]
	// What the kind also says, if it does (nil if not).
	pending   pendingRecorder[Op, O]
	abandoner abandoner[Op, O]
}

// NewWorker returns the engine's worker for the kind named name, whose
// operations live in table, built from env's pool, keys, logger and
// WorkerConfig; env.GroupFellBack, if set, hears of its grouped starter's
// and recorder's fallbacks.
func NewWorker[A jobOf, Op operationRow, O providerAnswer](env Env, name, action string, table Table, kind Attemptable[Op, O]) river.Worker[A] {
	w := &worker[A, Op, O]{pool: env.Pool, keys: env.Keys, log: env.Logger, t: env.Worker.timings(), action: action, table: table, kind: kind}
	starter, recorder := StartEach[Op]{Pool: env.Pool, Table: table, CallTimeout: w.t.CallTimeout}, RecordEach[A, Op, O]{Pool: env.Pool, Kind: kind}
	w.starter, w.recorder = starter, recorder
	if fastpath.Built && !env.Worker.Ungrouped {
		fallback := GroupFallback{Kind: name, Logger: env.Logger, FellBack: env.GroupFellBack}
		w.starter = NewStartGrouped[Op](env.Pool, table, w.t.CallTimeout, fallback, env.GroupWriters)
		w.recorder = NewRecordGrouped(recorder, RecordGroupedConfig{Fallback: fallback, Writers: env.GroupWriters, Timeout: w.t.RecordTimeout})
	}
	w.pending, _ = any(kind).(pendingRecorder[Op, O])
	w.abandoner, _ = any(kind).(abandoner[Op, O])
	return w
}

// Timeout bounds one attempt; the provider call carries a shorter deadline.
func (w *worker[A, Op, O]) Timeout(*river.Job[A]) time.Duration { return w.t.JobTimeout }

// Work runs one attempt; on the job's last attempt any failure hands the
// operation to reconciliation (lastAttempt).
func (w *worker[A, Op, O]) Work(ctx context.Context, job *river.Job[A]) error {
	tenantID, id := job.Args.Of()
	log := w.log.With(slog.String("tenant_id", tenantID), slog.String(w.table.Operation+"_id", id),
		slog.Int64("job_id", job.ID), slog.Int("attempt", job.Attempt))
	// sent is the clock this attempt stamped, once it has.
	var sent attemptClock
	last := lastAttempt{Action: w.action, Operation: w.table.Operation, RecordTimeout: w.t.RecordTimeout,
		HandOver: func(ctx context.Context, reason string) error { return w.handOver(ctx, job, reason, false, sent) }}
	clock := dbClock{stamp: time.Now(), read: time.Now()}
	if job.AttemptedAt != nil {
		clock.stamp = *job.AttemptedAt
	}
	err := last.Run(ctx, job.JobRow, log, func() error { return w.attempt(ctx, job, tenantID, id, &sent, &clock, log) })
	if err != nil && !isJobControl(err) {
		if nerr := noteFailedAttempt(ctx, job.JobRow, clock); nerr != nil {
			log.WarnContext(ctx, "could not note the failed attempt's times", slog.Any("error", nerr))
		}
	}
	return err
}

// attempt runs one attempt; clock moves to the database's clock as the
// attempt stamps it, by which its failure, if it fails, is dated after its
// provider call.
func (w *worker[A, Op, O]) attempt(ctx context.Context, job *river.Job[A], tenantID, id string, sent *attemptClock, clock *dbClock,
	log *slog.Logger,
) error {
	op, ok, err := w.starter.Start(ctx, tenantID, id)
	if err == nil && ok {
		if stamped := w.kind.Entry(op).LastAttemptAt; stamped != nil {
			*clock = dbClock{stamp: *stamped, read: time.Now()}
		}
	}
	if errors.Is(err, w.table.NotFound) {
		log.ErrorContext(ctx, w.action+" job for a "+w.table.Operation+" that does not exist")
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	e := w.kind.Entry(op)
	log = log.With(append(e.LogAttrs, slog.Int("generation", e.Generation))...)
	if !ok {
		log.InfoContext(ctx, w.table.Operation+" no longer waits for its provider call; nothing to do")
		return nil
	}
	age, err := attemptAge(e)
	if err != nil {
		return err
	}
	*sent = sentClock(e, w.t.CallTimeout)
	if age > w.t.KeyMargin {
		log.WarnContext(ctx, "provider idempotency window nearly over; not calling the provider", slog.Duration("since_first_attempt", age))
		return w.handOver(ctx, job, "the provider's idempotency window for this "+w.table.Operation+" has passed", false, *sent)
	}

	callCtx, cancelCall := context.WithTimeout(ctx, w.t.CallTimeout)
	out, err := w.kind.Send(callCtx, op)
	cancelCall()
	var handOver *HandOverError
	if errors.As(err, &handOver) {
		log.WarnContext(ctx, "handing the "+w.table.Operation+" to reconciliation", slog.String("reason", handOver.Reason))
		return w.handOver(context.WithoutCancel(ctx), job, handOver.Reason, false, *sent)
	}
	if err != nil {
		return err
	}
	// The answer is recorded even if the job's deadline or a shutdown
	// cancelled ctx meanwhile: on the last attempt a lost write would leave
	// the operation in flight with no job.
	ctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), w.t.RecordTimeout)
	defer cancelRecord()
	return w.record(ctx, job, id, op, out, age, *sent, log)
}

// record acts on the provider's answer: records it if final, notes it and
// polls if pending, hands the operation over if only a look-up can tell,
// and fails the attempt (retried with the same key) if it proves nothing.
func (w *worker[A, Op, O]) record(ctx context.Context, job *river.Job[A], id string, op Op, out O, age time.Duration, sent attemptClock, log *slog.Logger) error {
	j := out.Judge()
	log = log.With(slog.String(w.table.ProviderIDLog, j.ObjectID), slog.String("outcome", j.Kind.String()))

	switch {
	case isFinal(j.Kind):
		log.InfoContext(ctx, w.table.Operation+" final at the provider", slog.String("code", j.Code), slog.Any("error", j.Err))
		return w.recordFinal(ctx, job, op, out)
	case j.Kind == provider.Pending:
		if age <= w.t.MaxPollDuration {
			if w.pending != nil {
				if err := w.pending.RecordPending(ctx, w.pool, op, out); err != nil {
					return err
				}
			}
			log.InfoContext(ctx, w.table.Operation+" pending at the provider; polling", slog.String("provider_status", j.State))
			return river.JobSnooze(w.t.PollInterval)
		}
		if w.abandoner != nil {
			if ended, abandoned := w.abandoner.Abandon(ctx, op, out); abandoned {
				log.WarnContext(ctx, w.table.Operation+" still "+j.State+" at the provider; abandoned it")
				if ej := ended.Judge(); !isFinal(ej.Kind) {
					return w.undetermined(ctx, id, ej, log)
				}
				return w.recordFinal(ctx, job, op, ended)
			}
		}
		log.WarnContext(ctx, w.table.Operation+" still pending at the provider; giving up polling", slog.String("provider_status", j.State))
		return w.handOver(ctx, job, "the "+w.table.Operation+" stayed "+j.State+" at the provider", false, sent)
	case j.Kind == provider.KeyConflict:
		// The key is derived from the request (requestRef), so another
		// request under it is this one's earlier life, whose rows a restore
		// or a failover lost (its id, in the metadata, differed): only a
		// look-up by the ref finds its object, which the operation adopts.
		log.WarnContext(ctx, "the provider holds an earlier request under this "+w.table.Operation+"'s key; looking its object up to adopt it", slog.Any("error", j.Err))
		return w.handOver(ctx, job, "the provider holds an earlier request under this "+w.table.Operation+"'s key (its rows were lost?)", true, sent)
	}
	if j.Replayed && j.HTTPStatus >= 500 {
		log.WarnContext(ctx, "provider replays a stored error for this key; looking the "+w.table.Operation+" up instead", slog.Int("http_status", j.HTTPStatus))
		return w.handOver(ctx, job, fmt.Sprintf("the provider answers this %s's key with a stored %d error", w.table.Operation, j.HTTPStatus), true, sent)
	}
	return w.undetermined(ctx, id, j, log)
}

// isFinal reports whether an answer ends the operation at the provider.
func isFinal(k provider.Kind) bool {
	return k == provider.Succeeded || k == provider.Declined || k == provider.Rejected || k == provider.Authorized
}

// undetermined fails the attempt so that River retries it with the same
// key; on the last attempt, Work hands the operation over instead.
func (w *worker[A, Op, O]) undetermined(ctx context.Context, id string, j provider.Judgement, log *slog.Logger) error {
	log.WarnContext(ctx, "provider outcome undetermined; will retry with the same key", slog.Any("error", j.Err))
	return fmt.Errorf("%s %s: the provider's answer proves nothing: %w", w.action, id, j.Err)
}

// recordFinal commits a final answer: the operation's state, its key's
// final response and the job's completion, together.
func (w *worker[A, Op, O]) recordFinal(ctx context.Context, job *river.Job[A], op Op, out O) error {
	return w.recorder.Record(ctx, job, op, out)
}

// handOver gives the job's operation (if still in flight) to the
// reconciler, its key unknown, and completes the job, in one transaction;
// keySpent and sent as Table.HandOver's.
func (w *worker[A, Op, O]) handOver(ctx context.Context, job *river.Job[A], reason string, keySpent bool, sent attemptClock) error {
	tenantID, id := job.Args.Of()
	return postgres.InTx(ctx, w.pool, func(tx pgx.Tx) error {
		if err := w.kind.Lock(ctx, tx, tenantID, id); err != nil {
			return err
		}
		op, err := w.kind.Load(ctx, tx, tenantID, id)
		if err != nil {
			return err
		}
		if err := w.table.HandOver(ctx, tx, w.keys, w.kind.Entry(op), reason, keySpent, sent); err != nil {
			return err
		}
		return completeJob(ctx, tx, job)
	})
}

// HandOverError is what a kind's Send returns when the operation cannot
// be sent and only a look-up can settle it (its context is not what it
// must be); the engine hands it to the reconciler with Reason.
type HandOverError struct{ Reason string }

func (e *HandOverError) Error() string { return e.Reason }

// completeJob completes job in tx: with the outcome it records, or not at
// all.
func completeJob[T river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[T]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete job: %w", err)
	}
	return nil
}

// eachSucceeded calls each for every operation of table the provider
// carried out (its Made statuses) with a first provider attempt in [from,
// to], page by page in id order (its Columns read into Op): the
// ledger check's walk over what the books say the provider did.
func eachSucceeded[Op any](ctx context.Context, db postgres.Querier, table Table, from, to time.Time,
	id func(Op) string, each func(Op) error) error {
	made := table.Made
	if len(made) == 0 {
		made = []string{"succeeded"}
	}
	err := postgres.EachByID(ctx, db, 500, `
		SELECT `+table.Columns+` FROM `+table.Name+`
		WHERE status = ANY($3) AND first_provider_attempt_at BETWEEN $1 AND $2 AND id > $4
		ORDER BY id LIMIT 500`, id, each, from, to, made)
	if err != nil {
		return fmt.Errorf("check succeeded %ss: %w", table.Operation, err)
	}
	return nil
}
