package operation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/groupcommit"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// Kind is an operation kind as the rest of the service sees it: declared
// once by its package (a Spec) and registered in one list
// (internal/kinds), which the API's routes, the worker, the operator's
// commands, the console and the metrics all read. Nothing outside a kind's
// package names the kind otherwise.
type Kind interface {
	// Name is the kind's operation, singular ("refund"): its metrics
	// label, its name on log lines and in the operator's output.
	Name() string
	// Table is where the engine finds the kind's operations.
	Table() Table
	// Owns reports whether id is one of the kind's operations (by its
	// prefix), so that an operator's command reaches it by id alone.
	Owns(id string) bool
	// IDPrefixes start its operations' ids ("rfd"), for what an operator
	// reads: help, errors.
	IDPrefixes() []string
	// Statuses are the states its operations take, as its table's status
	// column holds them and the operator's commands filter by them.
	Statuses() []string
	// ProviderPrefixes start the ids of the provider objects the kind
	// acts on ("re"), which the metrics fold out of the provider's paths.
	ProviderPrefixes() []string
	// Routes mounts the kind's endpoints inside the authenticated /v1
	// group.
	Routes(r chi.Router, d Deps)
	// Start adds the kind's workers (its job's, its reconciler's, its
	// sweeper's, its ledger check's) and returns its periodic jobs.
	Start(workers *river.Workers, env Env) ([]Periodic, error)
	// Operator is how an operator's commands reach one of its operations.
	Operator(env Env) Operator
	// OfPayment lists the kind's operations of a payment, oldest first,
	// for the payment's timeline; nil for a kind with no payment.
	OfPayment(ctx context.Context, db Querier, tenantID, paymentID string) ([]Summary, error)
	// Ledger is the kind's ledger check; nil for a kind that has none.
	Ledger(env Env) LedgerPass
	// EventTypes are the provider events the kind answers itself
	// (SettleEvent); the webhook endpoint stores them with a job, unless
	// the kind's EventShortcuts (nil if none) say it needs none.
	EventTypes() []string
	EventShortcuts() eventShortcuts
	// SettleEvent reads the event's object from the provider and records
	// what it proves; result names what it did ("settled", "unchanged",
	// "not_ours").
	SettleEvent(ctx context.Context, env Env, ev Event) (result string, err error)
}

// Event is a provider event a kind answers: its type, the account it
// happened on ("" the platform's), its object's id and, where the object
// names one, its payment intent's.
type Event struct {
	ID, Type, Account, ObjectID, IntentID string
}

// What answering an event did, as the webhooks record it.
const (
	Settled   = "settled"
	Unchanged = "unchanged"
	NotOurs   = "not_ours"
	// FiledFinding: the event's object contradicts what is recorded;
	// nothing changed, and a ledger finding says what, for an operator.
	FiledFinding = "finding"
)

// Changed is Settled if changed, else Unchanged.
func Changed(changed bool) string {
	if changed {
		return Settled
	}
	return Unchanged
}

// eventShortcuts is what a kind whose events mostly tell what it records
// already (a payment's intent events, sent as its charge is answered)
// offers the webhooks, as SQL conditions over its own tables: an event
// stored Told needs no job (Unchanged), and one stored Awaited waits for
// the kind to record its own answer first, which a sweep then compares.
type eventShortcuts interface {
	// Told is the condition that the event (its type, object id and
	// account, as SQL expressions) tells only what the kind records.
	Told(eventType, objectID, account string) string
	// Awaited is the condition that the operation the event (payload, its
	// JSON) names on account still awaits its own first answer.
	Awaited(payload, account string) string
}

// Kinds is the registry: every kind the service runs, in the order their
// routes and workers are added.
type Kinds []Kind

// Of is the kind that owns id.
func (ks Kinds) Of(id string) (Kind, bool) {
	for _, k := range ks {
		if k.Owns(id) {
			return k, true
		}
	}
	return nil, false
}

// WithoutEventShortcuts are the kinds with their EventShortcuts turned
// off: every event they answer is stored with its job.
func (ks Kinds) WithoutEventShortcuts() Kinds {
	plain := make(Kinds, len(ks))
	for i, k := range ks {
		plain[i] = noShortcuts{k}
	}
	return plain
}

type noShortcuts struct{ Kind }

func (noShortcuts) EventShortcuts() eventShortcuts { return nil }

// Names are the kinds' names, in order.
func (ks Kinds) Names() []string {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.Name()
	}
	return names
}

// Described names each kind with the start of its ids, in order, for an
// operator's help: "payment (pay_…), refund (rfd_…)".
func (ks Kinds) Described() string {
	described := make([]string, len(ks))
	for i, k := range ks {
		ids := make([]string, len(k.IDPrefixes()))
		for j, p := range k.IDPrefixes() {
			ids[j] = p + "_…"
		}
		described[i] = k.Name() + " (" + strings.Join(ids, ", ") + ")"
	}
	return strings.Join(described, ", ")
}

// ProviderPrefixes start the ids of the provider objects any of the
// kinds acts on, each once.
func (ks Kinds) ProviderPrefixes() []string {
	var prefixes []string
	for _, k := range ks {
		prefixes = append(prefixes, k.ProviderPrefixes()...)
	}
	slices.Sort(prefixes)
	return slices.Compact(prefixes)
}

// Env is what the engine builds every kind's worker side from.
type Env struct {
	Pool      *pgxpool.Pool
	Keys      *idempotency.Store
	Provider  *provider.Client
	Logger    *slog.Logger
	Worker    WorkerConfig
	Reconcile ReconcileConfig
	Sweep     SweepConfig
	Ledger    LedgerCheckConfig
	// Observe, if set, receives each reconciliation pass's counts, with
	// its kind's name (for metrics).
	Observe func(kind string, res ReconcileResult)
	// Swept, if set, is called for each operation a sweeper handed to
	// reconciliation, with its kind's name. It must not block.
	Swept func(kind string)
	// GroupFellBack, if set, is called for each group of attempts that
	// could not be started in one statement (step StartStep), or of final
	// answers that could not be recorded in one transaction (RecordStep),
	// its members then written each alone, with the name of the kind whose
	// worker writes them (capture for captures and cancels, which share its
	// job). It must not block.
	GroupFellBack func(step, kind string)
	// GroupWriters, if set, caps the groups of starts and records that
	// every kind's worker writes at once, each holding a connection of
	// Pool, so that they leave the rest to River and the other jobs; each
	// kind's own caps (4 starts, 8 records) still apply.
	GroupWriters *groupcommit.Budget
}

// withDefaults is env with each service's defaults where its configuration
// leaves them zero: applied once, where a kind's declaration takes env, so
// that what the kind is handed is the configuration in force.
func (env Env) withDefaults() Env {
	env.Worker = env.Worker.WithDefaults()
	env.Reconcile = env.Reconcile.WithDefaults()
	env.Sweep = env.Sweep.WithDefaults()
	env.Ledger = env.Ledger.WithDefaults()
	return env
}

// Schedule names the interval a periodic job runs at, which the worker's
// configuration sets.
type Schedule int

const (
	EveryReconcile Schedule = iota
	EverySweep
	EveryLedgerCheck
)

// Periodic is a periodic job of a kind.
type Periodic struct {
	Args  river.JobArgs
	Every Schedule
}

// Operator is what an operator's commands ask of a kind.
type Operator interface {
	// Run is one pass of the kind's reconciler, as its periodic job runs it.
	Run(ctx context.Context) (ReconcileResult, error)
	// ReconcileNow looks one operation awaiting reconciliation up now.
	ReconcileNow(ctx context.Context, tenantID, id string) (ReconcileResult, error)
	// ReleaseKey releases a key stuck unknown, on the provider's proof only.
	ReleaseKey(ctx context.Context, tenantID, key, reason, operator string) (Released, error)
	// Show reads one operation as an operator sees it.
	Show(ctx context.Context, tenantID, id string) (Shown, error)
	// Find is Show for an operator who has only the id, of any tenant; the
	// kind's NotFound when there is none.
	Find(ctx context.Context, id string) (Shown, error)
	// List reads the kind's operations of every tenant, newest first, in
	// status if it is set, at most limit.
	List(ctx context.Context, status string, limit int) ([]Shown, error)
}

// Shown is one operation as an operator's command prints it: View in
// JSON, the rest in a table. ParentID is its payment's id, if it has one.
type Shown struct {
	View                                              any
	ID, ParentID, Status, FailureCode, FailureMessage string
	// TenantID and IdempotencyKey name the operation's key; Job its jobs,
	// FollowUps those of the jobs that act on it after (a payout's
	// cancel); ProviderID is the provider's object, once known.
	TenantID, IdempotencyKey string
	Job                      river.JobArgs
	FollowUps                []river.JobArgs
	ProviderID               *string
	// Account is the connected account it acts on; "" the platform's.
	Account    string
	Amount     int64
	Currency   string
	Generation int
	// ProviderKey is the key its provider call carries; FirstAttemptAt
	// and LastAttemptAt when the call was first and last sent (nil: never).
	ProviderKey                   string
	FirstAttemptAt, LastAttemptAt *time.Time
	// Calls are its provider calls: its kind's own (the Spec's Action,
	// under ProviderKey, at the attempt times), which the engine adds, then
	// those its kind shows beside it (a declined charge's intent cancel).
	Calls []Call
	// HandedOverAt is when it was last handed to reconciliation, and
	// HandOverReason why; ReconciledAt when the reconciler settled it
	// after (nil: it did not, or not yet).
	HandedOverAt, ReconciledAt *time.Time
	HandOverReason             string
	CreatedAt, UpdatedAt       time.Time
}

// Call is one provider call of an operation, as its timeline tells it:
// what it does ("charge", "refund", "cancel of the declined intent"), the
// provider key it carries, and when it was first and last sent (nil:
// never; the same moment: once).
type Call struct {
	What, Key       string
	FirstAt, LastAt *time.Time
	// Detail says more of it, if there is more to say.
	Detail string
}

// AllJobs names every job of the operation: its own, then its follow-ups'.
func (s Shown) AllJobs() []river.JobArgs { return append([]river.JobArgs{s.Job}, s.FollowUps...) }

// summary is the operation on a timeline.
func (s Shown) summary(operation string) Summary {
	return Summary{Operation: operation, ID: s.ID, Status: s.Status, Amount: s.Amount, IdempotencyKey: s.IdempotencyKey,
		ProviderObjectID: s.ProviderID, Generation: s.Generation, CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC(), Job: s.Job,
		ProviderKey: s.ProviderKey, FirstAttemptAt: s.FirstAttemptAt, LastAttemptAt: s.LastAttemptAt, Account: s.Account, Calls: s.Calls,
		HandedOverAt: s.HandedOverAt, ReconciledAt: s.ReconciledAt, HandOverReason: s.HandOverReason}
}

// Summary is one operation on a timeline: a payment's charge, refund,
// capture or cancel, or a payout.
type Summary struct {
	Operation        string    `json:"operation"`
	ID               string    `json:"id"`
	Status           string    `json:"status"`
	Amount           int64     `json:"amount"`
	IdempotencyKey   string    `json:"idempotency_key"`
	ProviderObjectID *string   `json:"provider_object_id"`
	Generation       int       `json:"generation"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	// ProviderKey is the key its provider call carries; FirstAttemptAt
	// and LastAttemptAt when that call was first and last sent.
	ProviderKey    string     `json:"provider_key"`
	FirstAttemptAt *time.Time `json:"first_attempt_at"`
	LastAttemptAt  *time.Time `json:"last_attempt_at"`
	// Job names the operation's jobs: its kind's job arguments.
	Job river.JobArgs `json:"-"`
	// Account, Calls and the hand-off are Shown's, for its timeline.
	Account                    string     `json:"-"`
	Calls                      []Call     `json:"-"`
	HandedOverAt, ReconciledAt *time.Time `json:"-"`
	HandOverReason             string     `json:"-"`
}

// Named is the type parameter of the engine's periodic jobs: a kind's
// declaration type, whose zero value names the kind, so that each kind's
// reconciler, sweeper and ledger check run as River kinds of their own
// ("reconcile_refunds") without a type per job in the kind's package.
type Named interface{ Name() string }

func plural[K Named]() string {
	var k K
	return k.Name() + "s"
}

// The periodic jobs of a kind K, on the maintenance queue, one at a time.
type (
	reconcileArgs[K Named]   struct{}
	sweepArgs[K Named]       struct{}
	ledgerCheckArgs[K Named] struct{}
)

// Kind is the job's River kind.
func (reconcileArgs[K]) Kind() string { return "reconcile_" + plural[K]() }

// Kind is the job's River kind.
func (sweepArgs[K]) Kind() string { return "sweep_stranded_" + plural[K]() }

// Kind is the job's River kind.
func (ledgerCheckArgs[K]) Kind() string { return "ledger_check_" + plural[K]() }

// InsertOpts puts the job on the maintenance queue.
func (reconcileArgs[K]) InsertOpts() river.InsertOpts { return MaintenanceInsertOpts() }

// InsertOpts puts the job on the maintenance queue.
func (sweepArgs[K]) InsertOpts() river.InsertOpts { return MaintenanceInsertOpts() }

// InsertOpts puts the job on the maintenance queue.
func (ledgerCheckArgs[K]) InsertOpts() river.InsertOpts { return MaintenanceInsertOpts() }

// Calls are what a kind supplies to the engine's worker (its provider
// call, Attempt) and reconciler (its look-up, which records what it finds
// through Attempt), over its job's arguments A and its provider's answer O:
// CallsOf makes them, so that a Spec names neither.
type Calls[Op operationRow] struct {
	jobKind, idArg string
	locking        func(env Env) locking[Op]
	worker         func(env Env, name, action string, table Table) func(*river.Workers) error
	reconciler     func(env Env, table Table) reconcilerOf
}

// reconcilerOf is a kind's reconciler as its periodic job and its
// operator's commands reach it.
type reconcilerOf interface {
	pass
	ReconcileNow(ctx context.Context, tenantID, id string) (ReconcileResult, error)
	ReleaseKey(ctx context.Context, tenantID, key, reason, operator string) (Released, error)
}

// CallsOf are a kind's Calls: attempt makes its provider call from a job
// whose arguments are A (the engine's Args, which name the argument that
// holds the operation's id for the sweeper), lookUp finds what became of
// one whose answer was lost.
func CallsOf[A namedJob, Op operationRow, O providerAnswer, T Attemptable[Op, O]](attempt func(env Env) T, lookUp func(env Env) LookUp[Op, O]) Calls[Op] {
	var job A
	return Calls[Op]{
		jobKind: job.Kind(), idArg: job.IDArg(),
		locking: func(env Env) locking[Op] { return attempt(env) },
		worker: func(env Env, name, action string, table Table) func(*river.Workers) error {
			return func(workers *river.Workers) error {
				return river.AddWorkerSafely(workers, NewWorker[A](env, name, action, table, attempt(env)))
			}
		},
		reconciler: func(env Env, table Table) reconcilerOf {
			return newReconciler(env.Pool, env.Keys, env.Logger, env.Reconcile, table, attempt(env), lookUp(env))
		},
	}
}

// Spec declares a kind K: its table, what it supplies to the engine's
// worker and reconciler (its Calls, over its operation Op), and what it
// shows. The engine builds and registers the rest: the worker, the
// reconciler, the sweeper, their periodic jobs, the operator's reach and
// the ledger check.
type Spec[K Named, Op operationRow] struct {
	// Where is the kind's table; Action names its provider call on log
	// lines ("charge"), the kind's name if empty.
	Where  Table
	Action string
	// Prefixes are the prefixes of the kind's ids ("rfd").
	Prefixes []string
	// States are the states its operations take, in the order one meets
	// them (its table's status column allows exactly these).
	States []string
	// ProviderObjects are the prefixes of the ids of the provider objects
	// the kind acts on (provider.RefundPrefix).
	ProviderObjects []string
	// Stranded is what an operation shows when the sweeper finds it with no
	// job left.
	Stranded string
	// SharesJob: the job's worker is another kind's, declared beside this
	// one on the same table and job (a capture's and a cancel's); JobWhere
	// is then the whole table the job's worker acts on.
	SharesJob bool
	JobWhere  Table
	// Mount adds the kind's endpoints.
	Mount func(r chi.Router, d Deps)
	// Calls are its provider call and look-up (CallsOf).
	Calls Calls[Op]
	// Show is an operation as an operator sees it, and on a timeline
	// (Lifecycle.Show); PaymentOps lists a payment's operations of the
	// kind, oldest first: by default, for a kind whose parent is the
	// payment, its operations of the parent.
	Show       func(op Op) Shown
	PaymentOps func(ctx context.Context, db Querier, tenantID, paymentID string) ([]Op, error)
	// LedgerCheck, if set, is the kind's side of the ledger check.
	LedgerCheck func(env Env) LedgerPass
	// MoreWorkers, if set, adds the workers of the kind's own jobs beside
	// the engine's (a payout's cancel), and returns those that are
	// periodic.
	MoreWorkers func(workers *river.Workers, env Env) ([]Periodic, error)
	// Events are the provider events Settle answers, if the kind answers
	// any itself: Settle reads the event's object again from the provider
	// and records what it proves, and says what it did (Changed, or the
	// kind's own word: "finding"). An object that is not the kind's
	// (another account's, or made elsewhere) is the table's NotFound.
	Events []string
	Settle func(ctx context.Context, env Env, ev Event) (result string, err error)
	// Shortcuts, if set, lets the webhooks store the kind's events that
	// need no job without one.
	Shortcuts eventShortcuts
}

// EventTypes are the events the kind answers.
func (s Spec[K, Op]) EventTypes() []string { return s.Events }

// Ledger is the kind's ledger check, if it has one.
func (s Spec[K, Op]) Ledger(env Env) LedgerPass {
	env = env.withDefaults()
	if s.LedgerCheck == nil {
		return nil
	}
	return s.LedgerCheck(env)
}

// SettleEvent answers one of the kind's events: what Settle did, or
// NotOurs.
func (s Spec[K, Op]) SettleEvent(ctx context.Context, env Env, ev Event) (string, error) {
	env = env.withDefaults()
	if s.Settle == nil {
		return "", fmt.Errorf("the %s kind answers no events", s.Name())
	}
	result, err := s.Settle(ctx, env, ev)
	switch {
	case errors.Is(err, s.Where.NotFound):
		return NotOurs, nil
	case errors.Is(err, ErrDuplicateObject):
		env.Logger.ErrorContext(ctx, "a provider object names an operation that records another; left for an operator",
			slog.String("operation", s.Name()), slog.String("event_id", ev.ID), slog.String("provider_object_id", ev.ObjectID),
			slog.String("finding", ledger.KindDuplicateObject), slog.Any("error", err))
		return FiledFinding, nil
	}
	return result, err
}

// EventShortcuts are the kind's, or nil.
func (s Spec[K, Op]) EventShortcuts() eventShortcuts { return s.Shortcuts }

// Name is K's.
func (s Spec[K, Op]) Name() string {
	var k K
	return k.Name()
}

// Table is where the kind's operations live.
func (s Spec[K, Op]) Table() Table { return s.Where }

// IDPrefixes start the kind's operation ids.
func (s Spec[K, Op]) IDPrefixes() []string { return slices.Clone(s.Prefixes) }

// StatusNames are a kind's states as Spec.States takes them.
func StatusNames[S ~string](states ...S) []string {
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = string(st)
	}
	return names
}

// Statuses are the states the kind's operations take.
func (s Spec[K, Op]) Statuses() []string { return slices.Clone(s.States) }

// Owns reports whether id starts with one of the kind's prefixes.
func (s Spec[K, Op]) Owns(id string) bool {
	for _, p := range s.Prefixes {
		if strings.HasPrefix(id, p+"_") {
			return true
		}
	}
	return false
}

// ProviderPrefixes start the ids of the provider objects the kind acts on.
func (s Spec[K, Op]) ProviderPrefixes() []string { return s.ProviderObjects }

// Routes mounts the kind's endpoints.
func (s Spec[K, Op]) Routes(r chi.Router, d Deps) { s.Mount(r, d) }

// Start adds the worker, the reconciler, the sweeper and, if the kind has
// one, the ledger check, and returns their periodic jobs.
func (s Spec[K, Op]) Start(workers *river.Workers, env Env) ([]Periodic, error) {
	env = env.withDefaults()
	sweepCfg := env.Sweep
	if env.Swept != nil {
		sweepCfg.OnSwept = func() { env.Swept(s.Name()) }
	}
	sweeper := newSweeper(env.Pool, env.Keys, env.Logger, sweepCfg, s.Where,
		drivingJob{JobKind: s.Calls.jobKind, JobArg: s.Calls.idArg, Reason: s.Stranded}, s.Calls.locking(env))
	reconcile := &reconcileWorker[reconcileArgs[K]]{Reconciler: s.reconciler(env)}
	if env.Observe != nil {
		reconcile.Observe = func(res ReconcileResult) { env.Observe(s.Name(), res) }
	}
	adds := []func() error{
		func() error { return river.AddWorkerSafely(workers, reconcile) },
		func() error { return river.AddWorkerSafely(workers, &sweepWorker[sweepArgs[K], Op]{sweeper: sweeper}) },
	}
	if !s.SharesJob {
		table := s.Where
		if s.JobWhere.Name != "" {
			table = s.JobWhere
		}
		addWorker := s.Calls.worker(env, s.Name(), cmp.Or(s.Action, s.Name()), table)
		adds = append(adds, func() error { return addWorker(workers) })
	}
	periodic := []Periodic{{reconcileArgs[K]{}, EveryReconcile}, {sweepArgs[K]{}, EverySweep}}
	if s.LedgerCheck != nil {
		adds = append(adds, func() error {
			return river.AddWorkerSafely(workers, &ledgerCheckWorker[ledgerCheckArgs[K]]{Checker: s.LedgerCheck(env)})
		})
		periodic = append(periodic, Periodic{ledgerCheckArgs[K]{}, EveryLedgerCheck})
	}
	if s.MoreWorkers != nil {
		adds = append(adds, func() error {
			more, err := s.MoreWorkers(workers, env)
			periodic = append(periodic, more...)
			return err
		})
	}
	for _, add := range adds {
		if err := add(); err != nil {
			return nil, fmt.Errorf("add the %s workers: %w", s.Name(), err)
		}
	}
	return periodic, nil
}

func (s Spec[K, Op]) reconciler(env Env) reconcilerOf { return s.Calls.reconciler(env, s.Where) }

// Operator is the kind's reconciler and its operator's view.
func (s Spec[K, Op]) Operator(env Env) Operator {
	env = env.withDefaults()
	return specOperator[Op]{reconcilerOf: s.reconciler(env), locking: s.Calls.locking(env), show: s.shown, pool: env.Pool}
}

// OfPayment lists the kind's operations of a payment.
func (s Spec[K, Op]) OfPayment(ctx context.Context, db Querier, tenantID, paymentID string) ([]Summary, error) {
	ofPayment := s.PaymentOps
	if p := s.Where.Parent; ofPayment == nil && p != nil && p.Table == "payments" {
		ofPayment = Rows[Op]{Table: s.Where}.OfParent
	}
	if ofPayment == nil {
		return nil, nil
	}
	ops, err := ofPayment(ctx, db, tenantID, paymentID)
	if err != nil {
		return nil, err
	}
	list := make([]Summary, len(ops))
	for i, op := range ops {
		list[i] = s.shown(op).summary(s.Name())
	}
	return list, nil
}

// callName names the kind's provider call on its timeline: its Action,
// unless its job's worker acts for other kinds too (JobWhere), whose
// Action then names them all ("payment action"): its own name does.
func (s Spec[K, Op]) callName() string {
	if s.JobWhere.Name != "" {
		return s.Name()
	}
	return cmp.Or(s.Action, s.Name())
}

// shown is the kind's Show of op, its own provider call first among its
// calls: the call the engine's worker makes, under the provider key it
// derives, whatever the kind.
func (s Spec[K, Op]) shown(op Op) Shown {
	shown := s.Show(op)
	own := Call{What: s.callName(), Key: shown.ProviderKey, FirstAt: shown.FirstAttemptAt, LastAt: shown.LastAttemptAt}
	shown.Calls = append([]Call{own}, shown.Calls...)
	return shown
}

type specOperator[Op any] struct {
	reconcilerOf
	locking locking[Op]
	show    func(Op) Shown
	pool    *pgxpool.Pool
}

func (o specOperator[Op]) Show(ctx context.Context, tenantID, id string) (Shown, error) {
	op, err := o.locking.Load(ctx, o.pool, tenantID, id)
	if err != nil {
		return Shown{}, err
	}
	return o.show(op), nil
}

func (o specOperator[Op]) Find(ctx context.Context, id string) (Shown, error) {
	_, table, _ := o.passInfo()
	var tenantID string
	err := o.pool.QueryRow(ctx, `SELECT tenant_id FROM `+table.Name+` WHERE id = $1`+table.scoped(), id).Scan(&tenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		err = table.NotFound
	}
	if err != nil {
		return Shown{}, fmt.Errorf("find %s %q: %w", table.Operation, id, err)
	}
	return o.Show(ctx, tenantID, id)
}

func (o specOperator[Op]) List(ctx context.Context, status string, limit int) ([]Shown, error) {
	_, table, _ := o.passInfo()
	rows, err := o.pool.Query(ctx, `SELECT tenant_id, id FROM `+table.Name+` WHERE ($1 = '' OR status = $1)`+table.scoped()+`
		ORDER BY id DESC LIMIT $2`, status, limit)
	ids, err := postgres.CollectAll[struct {
		TenantID string `db:"tenant_id"`
		ID       string `db:"id"`
	}](rows, err, "list "+table.Operation+"s")
	if err != nil {
		return nil, err
	}
	list := make([]Shown, 0, len(ids))
	for _, op := range ids {
		shown, err := o.Show(ctx, op.TenantID, op.ID)
		if err != nil {
			return nil, err
		}
		list = append(list, shown)
	}
	return list, nil
}
