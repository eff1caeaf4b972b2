package operation

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// LedgerCheckConfig tunes a kind's ledger check. Zero values take the defaults.
type LedgerCheckConfig struct {
	// Window is how far back the periodic check looks. Defaults to 26h:
	// a day, plus margin for a run that was late.
	Window time.Duration
	// ClockSkew widens the provider's listing on both sides, so an object
	// of an operation inside the window is listed whatever the clocks say.
	// Defaults to 5m.
	ClockSkew time.Duration
	// UnsettledAfter is how long after its creation a succeeded provider
	// object whose operation is still not final counts as beyond the
	// reconciler's reach (a reconciler that reads it settles it on its next
	// look, at most RECONCILE_BACKOFF_MAX later). Defaults to 2h.
	UnsettledAfter time.Duration
	// CallTimeout bounds one provider read. Defaults to 20s.
	CallTimeout time.Duration
	// MaxPages bounds the listing (100 objects a page). Defaults to 500.
	MaxPages int
}

// WithDefaults returns the configuration with zero values defaulted.
func (c LedgerCheckConfig) WithDefaults() LedgerCheckConfig {
	c.Window = cmp.Or(c.Window, 26*time.Hour)
	c.ClockSkew = cmp.Or(c.ClockSkew, 5*time.Minute)
	c.UnsettledAfter = cmp.Or(c.UnsettledAfter, 2*time.Hour)
	c.CallTimeout = cmp.Or(c.CallTimeout, 20*time.Second)
	c.MaxPages = cmp.Or(c.MaxPages, 500)
	return c
}

// providerObject is a provider object as the ledger check reads it: its
// id, and the metadata that names its operation (Table.Named).
type providerObject interface {
	Ref() (id string, metadata map[string]string)
}

// Audited is an operation kind's side of the ledger check. Obj is the
// provider object its operations make (an intent, a refund). The engine
// lists the objects, matches each with its operation, reads by id what the
// listing did not show and records the findings; the kind only says what
// disagrees.
type Audited[Op, Obj any] interface {
	// List calls page with every page of the objects created in w, on
	// every account that may hold the kind's objects.
	List(ctx context.Context, w provider.ListWindow, page func(account string, objs []Obj) error) error
	// Retrieve reads the object id from the account of op.
	Retrieve(ctx context.Context, op Op, id string) Read[Obj]
	// Compare says what disagrees between a listed obj and op, the
	// operation it matched; op is nil when obj matched none of ours.
	Compare(ctx context.Context, obj Obj, op *Op, cfg LedgerCheckConfig) ([]Finding, error)
	// Confirm says what disagrees between a succeeded op and its object,
	// read by id.
	Confirm(op Op, r Read[Obj]) []Finding
}

// misser is what a kind whose findings name more than its operation (a
// refund's payment) says of a made op whose object is not at the provider:
// providerID is the one it recorded, "" when none. Without it the finding
// is missing_<kind>.
type misser[Op any] interface {
	Missing(op Op, providerID string) Finding
}

// Read is the answer of one provider read by id.
type Read[Obj any] struct {
	Obj  Obj
	Kind provider.Kind
	// HTTPStatus and Err are the provider's failure, if the read failed.
	HTTPStatus int
	Err        error
}

// ReadOf is a read by id that found obj (nil if none), as read judged it.
func ReadOf[Obj any](obj Obj, read provider.Judgement) Read[Obj] {
	return Read[Obj]{Obj: obj, Kind: read.Kind, HTTPStatus: read.HTTPStatus, Err: read.Err}
}

// objectRef is what a provider object says of itself: its id, and the
// operation, tenant and request ref its metadata names (any may be "").
type objectRef struct{ ID, OperationID, TenantID, Ref string }

func (t Table) objectRef(obj providerObject) objectRef {
	id, metadata := obj.Ref()
	tenantID, opID := t.Named(metadata)
	return objectRef{ID: id, OperationID: opID, TenantID: tenantID, Ref: metadata[MetadataRef]}
}

// Finding is one disagreement and its evidence.
type Finding struct {
	ledger.Disagreement
	Evidence map[string]any
}

// evidence is f's evidence, made if the kind gave none.
func (f *Finding) evidence() map[string]any {
	if f.Evidence == nil {
		f.Evidence = map[string]any{}
	}
	return f.Evidence
}

// ledgerChecker compares the provider's objects of one operation kind
// with the kind's operations and records every disagreement as a ledger
// finding, for an operator. It only reads at the provider (lists objects,
// reads one by id): it never sends an operation, and never changes one.
type ledgerChecker[Op operationRow, Obj providerObject] struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	cfg    LedgerCheckConfig
	table  Table
	kind   Audited[Op, Obj]
}

// NewLedgerChecker returns the ledger check of the kind whose operations
// are table's rows (its Columns read into an Op).
func NewLedgerChecker[Op operationRow, Obj providerObject](pool *pgxpool.Pool, logger *slog.Logger, cfg LedgerCheckConfig, table Table,
	kind Audited[Op, Obj]) LedgerPass {
	return &ledgerChecker[Op, Obj]{pool: pool, logger: logger, cfg: cfg.WithDefaults(), table: table, kind: kind}
}

// LedgerCheckResult is what one check saw and found.
type LedgerCheckResult struct {
	// Objects names what the provider listed ("provider refunds"),
	// Operations what was looked for ("refunds"), which are Made
	// ("succeeded").
	Objects, Operations, Made string
	From, To                  time.Time
	// Listed is how many objects the provider listed; Succeeded how many
	// succeeded operations of the window were looked for at the provider.
	Listed, Succeeded int
	// Unchecked counts operations whose object could not be read (a
	// provider error): the next check looks again.
	Unchecked     int
	Disagreements []ledger.Disagreement
}

// NewFindings counts the disagreements that were not already open findings.
func (r LedgerCheckResult) NewFindings() int {
	n := 0
	for _, d := range r.Disagreements {
		if d.New {
			n++
		}
	}
	return n
}

// Check compares the provider objects created in [from, to] (widened by
// the clock skew) with our operations, and the operations that succeeded
// with a first provider attempt in [from, to] with the provider's objects.
func (c *ledgerChecker[Op, Obj]) Check(ctx context.Context, from, to time.Time) (LedgerCheckResult, error) {
	res := LedgerCheckResult{From: from, To: to, Objects: cmp.Or(c.table.Listed, "provider "+c.table.Operation+"s"),
		Operations: c.table.Operation + "s", Made: "succeeded"}
	if len(c.table.Made) > 0 {
		res.Made = "made"
	}
	listed := map[string]bool{}
	window := provider.ListWindow{CreatedFrom: from.Add(-c.cfg.ClockSkew), CreatedTo: to.Add(c.cfg.ClockSkew), MaxPages: c.cfg.MaxPages}
	err := c.kind.List(ctx, window, func(account string, page []Obj) error {
		res.Listed += len(page)
		for _, obj := range page {
			listed[c.table.objectRef(obj).ID] = true
		}
		return c.comparePage(ctx, account, page, &res)
	})
	if err != nil {
		return res, fmt.Errorf("ledger check of %ss: %w", c.table.Operation, err)
	}
	err = eachSucceeded(ctx, c.pool, c.table, from, to,
		func(op Op) string { return op.Entry().ID },
		func(op Op) error {
			res.Succeeded++
			return c.checkExists(ctx, op, listed, &res)
		})
	if err != nil {
		return res, fmt.Errorf("ledger check of %ss: %w", c.table.Operation, err)
	}
	return res, nil
}

// comparePage compares one page of objects, listed on account, with the
// operations they name (by metadata), that recorded them, or, for an
// object whose operation's rows were lost, that were made for the same
// request since (its ref). An operation of another account is not the
// object's: an account's object can name any id, and metadata naming
// another tenant's operation is not ours to match.
func (c *ledgerChecker[Op, Obj]) comparePage(ctx context.Context, account string, page []Obj, res *LedgerCheckResult) error {
	var operationIDs, providerIDs, refs []string
	for _, obj := range page {
		ref := c.table.objectRef(obj)
		if ref.OperationID != "" {
			operationIDs = append(operationIDs, ref.OperationID)
		}
		if ref.Ref != "" {
			refs = append(refs, ref.Ref)
		}
		providerIDs = append(providerIDs, ref.ID)
	}
	rows, err := c.pool.Query(ctx, `
		SELECT `+c.table.Columns+` FROM `+c.table.Name+`
		WHERE (id = ANY($1) OR `+c.table.ProviderIDColumn+` = ANY($2) OR oncepay_ref = ANY($3))`+c.table.scoped(),
		operationIDs, providerIDs, refs)
	found, err := postgres.CollectAll[Op](rows, err, "read the "+c.table.Operation+"s of listed objects")
	if err != nil {
		return err
	}
	byID, byProviderID, byRef := map[string]int{}, map[string]int{}, map[string]int{}
	for i, op := range found {
		ref := op.Entry()
		byID[ref.ID] = i
		if ref.ProviderID != nil {
			byProviderID[*ref.ProviderID] = i
		}
		if ref.Ref != "" {
			if j, seen := byRef[ref.Ref]; !seen || found[j].Entry().ID < ref.ID {
				byRef[ref.Ref] = i // the newest, as Settle adopts
			}
		}
	}
	for _, obj := range page {
		ref := c.table.objectRef(obj)
		i, ok := byID[ref.OperationID]
		if ok && ref.TenantID != "" && ref.TenantID != found[i].Entry().TenantID {
			ok = false
		}
		if !ok {
			i, ok = byProviderID[ref.ID]
		}
		if !ok && ref.Ref != "" {
			i, ok = byRef[ref.Ref]
		}
		var op *Op
		if ok && found[i].Entry().Account == account {
			op = &found[i]
		}
		var findings []Finding
		if op != nil {
			if dup, ok := c.table.duplicateFor(obj, (*op).Entry()); ok {
				findings = append(findings, dup)
			}
		}
		if len(findings) == 0 {
			if findings, err = c.kind.Compare(ctx, obj, op, c.cfg); err != nil {
				return err
			}
		}
		if op == nil && ref.Ref != "" {
			for i := range findings {
				// Made by oncepay for a request whose rows are gone (a restore,
				// a failover that lost commits), and never retried since.
				findings[i].evidence()[MetadataRef] = ref.Ref
				findings[i].evidence()["note"] = "made by oncepay for a request whose rows are gone; a retry of that request adopts it"
			}
		}
		for _, f := range findings {
			if account != "" {
				f.evidence()["account"] = account
			}
			if err := c.record(ctx, res, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// duplicateFor is the finding of obj when it was made for the same request
// as op by an operation whose rows were lost (Earlier) while op records
// another object: two provider objects for one client's request, each of
// which may have moved money. An object naming op itself is the kind's to
// compare.
func (t Table) duplicateFor(obj providerObject, op Entry) (Finding, bool) {
	objectID, metadata := obj.Ref()
	if !t.Earlier(metadata, op) || op.ProviderID == nil || *op.ProviderID == objectID {
		return Finding{}, false
	}
	d := ledger.Disagreement{Kind: ledger.KindDuplicateObject, OperationID: op.ID, ProviderObjectID: objectID,
		Reason: fmt.Sprintf("provider %ss %s and %s were both made for one request (ref %s): %s %s records %s",
			t.Operation, objectID, *op.ProviderID, op.Ref, t.Operation, op.ID, *op.ProviderID)}
	d.PaymentID = t.paymentOf(op)
	return Finding{Disagreement: d, Evidence: map[string]any{"provider_object": obj, t.ProviderIDColumn: *op.ProviderID,
		MetadataRef: op.Ref, t.Operation: map[string]any{"id": op.ID, "status": op.Status, "generation": op.Generation}}}, true
}

// missing is the finding of a made op whose object is not at the provider.
func (c *ledgerChecker[Op, Obj]) missing(op Op, opID, providerID string) Finding {
	if m, ok := c.kind.(misser[Op]); ok {
		return m.Missing(op, providerID)
	}
	name, status := c.table.Operation, op.Entry().Status
	reason := fmt.Sprintf("%s %s is %s but records no provider %s", name, opID, status, name)
	if providerID != "" {
		reason = fmt.Sprintf("%s %s is %s, but its provider %s %s does not exist", name, opID, status, name, providerID)
	}
	return Finding{Disagreement: ledger.Disagreement{Kind: "missing_" + name, OperationID: opID, ProviderObjectID: providerID, Reason: reason},
		Evidence: map[string]any{name: op}}
}

// checkExists looks for the object of a succeeded operation: one the
// listing did not show is read by id, and one that does not exist is a
// finding.
func (c *ledgerChecker[Op, Obj]) checkExists(ctx context.Context, op Op, listed map[string]bool, res *LedgerCheckResult) error {
	ref := op.Entry()
	if ref.ProviderID == nil {
		return c.record(ctx, res, c.missing(op, ref.ID, ""))
	}
	providerID := *ref.ProviderID
	if listed[providerID] {
		return nil // compared with the operation already
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	read := c.kind.Retrieve(callCtx, op, providerID)
	cancel()
	switch {
	case read.Err != nil && read.HTTPStatus == http.StatusNotFound:
		f := c.missing(op, ref.ID, providerID)
		f.evidence()["provider_error"] = read.Err.Error()
		return c.record(ctx, res, f)
	case read.Err != nil:
		res.Unchecked++
		c.logger.WarnContext(ctx, "ledger check could not read a provider object", slog.String("operation", c.table.Operation),
			slog.String(c.table.Operation+"_id", ref.ID), slog.String(c.table.ProviderIDLog, providerID), slog.Any("error", read.Err))
		return nil
	}
	for _, f := range c.kind.Confirm(op, read) {
		if err := c.record(ctx, res, f); err != nil {
			return err
		}
	}
	return nil
}

func (c *ledgerChecker[Op, Obj]) record(ctx context.Context, res *LedgerCheckResult, f Finding) error {
	d, err := ledger.Report(ctx, c.pool, c.logger, f.Disagreement, f.evidence())
	if err != nil {
		return err
	}
	res.Disagreements = append(res.Disagreements, d)
	return nil
}

// LedgerPass is one kind's ledger check, as ledgerCheckWorker runs it: a
// ledger check of any kind.
type LedgerPass interface {
	Check(ctx context.Context, from, to time.Time) (LedgerCheckResult, error)
	passInfo() (LedgerCheckConfig, Table, *slog.Logger)
}

func (c *ledgerChecker[Op, Obj]) passInfo() (LedgerCheckConfig, Table, *slog.Logger) {
	return c.cfg, c.table, c.logger
}

// ledgerCheckWorker runs a kind's ledger check over its window as a
// River job. Two runs side by side are harmless: a finding already open is
// not recorded again.
type ledgerCheckWorker[Args river.JobArgs] struct {
	river.WorkerDefaults[Args]
	Checker LedgerPass
}

// Timeout lets a run list a large window page by page.
func (w *ledgerCheckWorker[Args]) Timeout(*river.Job[Args]) time.Duration {
	return 15 * time.Minute
}

// Work checks the window ending now.
func (w *ledgerCheckWorker[Args]) Work(ctx context.Context, _ *river.Job[Args]) error {
	cfg, table, logger := w.Checker.passInfo()
	to := time.Now()
	res, err := w.Checker.Check(ctx, to.Add(-cfg.Window), to)
	logger.InfoContext(ctx, "ledger check", slog.String("operation", table.Operation), slog.Int("listed", res.Listed),
		slog.Int("succeeded", res.Succeeded), slog.Int("disagreements", len(res.Disagreements)),
		slog.Int("new_findings", res.NewFindings()), slog.Int("unchecked", res.Unchecked), slog.Any("error", err))
	return err
}
