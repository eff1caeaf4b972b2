package operation_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/internal/testkit/workertest"
)

// The engine's tests run a kind of their own, the widget: a table the
// test creates, the engine's job arguments, and a provider the test
// scripts. Nothing of a real kind's domain gets in the way of what the
// engine itself promises.

// widget names the kind: its job is River kind "widget", its passes
// reconcile_widgets and sweep_stranded_widgets.
type widget struct{}

func (widget) Name() string { return "widget" }

type widgetArgs = operation.Args[widget]

// A widget's states, as its table's status column allows them.
const (
	widgetProcessing       = "processing"
	widgetSucceeded        = "succeeded"
	widgetFailed           = "failed"
	widgetInReconciliation = "requires_reconciliation"
)

// widgetsDDL makes the kind's table, with the columns operation.Lifecycle
// reads and the engine writes, and the receipts a final answer writes
// beside it (what a real kind's final answer changes elsewhere: a
// payment's amount refunded), which count the final answers committed.
const widgetsDDL = `
CREATE TABLE widgets (
    id                        text        PRIMARY KEY,
    tenant_id                 text        NOT NULL REFERENCES tenants (id),
    idempotency_key           text        NOT NULL,
    amount                    bigint      NOT NULL,
    status                    text        NOT NULL CHECK (status IN ('processing', 'succeeded', 'failed', 'requires_reconciliation')),
    provider_account          text,
    provider_idempotency_key  text        NOT NULL,
    provider_key_generation   integer     NOT NULL DEFAULT 1,
    provider_widget_id        text,
    oncepay_ref               text,
    failure_code              text,
    failure_message           text,
    first_provider_attempt_at timestamptz,
    last_provider_attempt_at  timestamptz,
    provider_attempt_deadline timestamptz,
    provider_key_spent_at     timestamptz,
    reconcile_after           timestamptz,
    reconcile_attempts        integer     NOT NULL DEFAULT 0,
    handed_over_at            timestamptz,
    handed_over_reason        text,
    reconciled_at             timestamptz,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE widget_receipts (
    widget_id text NOT NULL REFERENCES widgets (id),
    status    text NOT NULL
);`

// Widget is one widget operation, as its table holds it and the API shows it.
type Widget struct {
	operation.Lifecycle
	Amount           int64   `json:"amount" db:"amount"`
	Status           string  `json:"status" db:"status"`
	ProviderWidgetID *string `json:"provider_widget_id" db:"provider_widget_id"`
}

// Entry is what the engine reads of a widget.
func (w Widget) Entry() operation.Entry { return w.EntryIn(w.Status, w.ProviderWidgetID) }

// widgetObject is a widget at the provider.
type widgetObject struct {
	ID, Status string
	Metadata   map[string]string
}

// Ref is the object's id and the metadata that names its widget.
func (o *widgetObject) Ref() (string, map[string]string) { return o.ID, o.Metadata }

// widgetAnswer is the provider's answer about a widget.
type widgetAnswer struct{ judgement provider.Judgement }

func (a widgetAnswer) Judge() provider.Judgement { return a.judgement }

// answerOf is what a read of obj answers.
func answerOf(obj *widgetObject) widgetAnswer {
	j := provider.Judgement{HTTPStatus: http.StatusOK, ObjectID: obj.ID, State: obj.Status}
	switch obj.Status {
	case widgetSucceeded:
		j.Kind = provider.Succeeded
	case widgetFailed:
		j.Kind, j.Code = provider.Declined, "widget_declined"
	default:
		j.Kind = provider.Pending
	}
	return widgetAnswer{j}
}

// reply is one scripted answer to a request the provider had not seen
// under its key: the object it made (in status made; none if ""), whether
// it stored its answer under the key (then replayed to every later request
// with the key), and what the client is answered. lost: the answer never
// reaches the client, a transport error after the provider committed.
// refusal: the kind's Send fails before any request leaves.
type reply struct {
	made    string
	stores  bool
	answer  provider.Judgement
	lost    bool
	refusal error
}

func succeeds() reply {
	return reply{made: widgetSucceeded, stores: true, answer: provider.Judgement{Kind: provider.Succeeded, HTTPStatus: http.StatusOK}}
}

func declines() reply {
	return reply{made: widgetFailed, stores: true, answer: provider.Judgement{Kind: provider.Declined, HTTPStatus: http.StatusPaymentRequired,
		Code: "widget_declined", Err: errors.New("the provider declined the widget")}}
}

func rejects() reply {
	return reply{stores: true, answer: provider.Judgement{Kind: provider.Rejected, HTTPStatus: http.StatusBadRequest,
		Code: "widget_invalid", Err: errors.New("the provider rejected the widget's parameters")}}
}

func staysPending() reply {
	return reply{made: "pending", stores: true, answer: provider.Judgement{Kind: provider.Pending, HTTPStatus: http.StatusOK}}
}

// freshServerError is a 5xx the provider answered before it did anything
// and did not store: a retry under the key is a new request.
func freshServerError() reply {
	return reply{answer: provider.Judgement{Kind: provider.Ambiguous, HTTPStatus: http.StatusServiceUnavailable, Err: errors.New("503 from the provider")}}
}

// storedServerError is a 500 the provider stored under the key, having
// made the object in status made or nothing (""): every retry under the
// key is answered with it, replayed.
func storedServerError(made string) reply {
	return reply{made: made, stores: true, answer: provider.Judgement{Kind: provider.Ambiguous, HTTPStatus: http.StatusInternalServerError,
		Err: errors.New("500 from the provider")}}
}

func transportError() reply {
	return reply{answer: provider.Judgement{Kind: provider.Ambiguous, Err: errors.New("connection reset by peer")}}
}

// answerLost: the provider made the widget and stored its success, and the
// connection dropped before the answer arrived.
func answerLost() reply {
	r := succeeds()
	r.lost = true
	return r
}

// refusedBySend: the kind's Send cannot send the widget (err, or a
// HandOverError for what only a look-up can settle).
func refusedBySend(err error) reply { return reply{refusal: err} }

// widgetProvider is the provider as the tests script it. It keeps what a
// provider with idempotency keys keeps: the objects it made, and the
// answer it stored under each key, replayed to every later request under
// the key (a request with other parameters under a stored key is a key
// conflict). A request under a key it stored nothing for takes the next
// reply scripted for its widget's request (its ref, which the test knows
// before the widget exists); the last one repeats.
type widgetProvider struct {
	mu       sync.Mutex
	script   map[string][]reply // by ref
	stored   map[string]storedAnswer
	objects  []*widgetObject
	made     int            // objects ever made, forgotten ones included
	requests map[string]int // by provider key
	replays  map[string]int // by provider key
	reads    int
	listings int
	// failing reads and listings left, each answered with a 500.
	failReads, failListings int
	// listingsHeld, if set, is a barrier listings wait at until
	// listingsDue more have arrived: looks made at the same moment.
	listingsHeld chan struct{}
	listingsDue  int
	// hold, if set, is a gate that requests wait at: those under one of
	// holdKeys (any key if none) past holdAfter requests under it.
	hold      chan struct{}
	holdKeys  map[string]bool
	holdAfter int
	// meanwhile, if set, runs while each request is at the provider, with
	// the request's metadata: what the database does during a call.
	meanwhile func(metadata map[string]string)
}

// storedAnswer is what the provider keeps under a key: the request's
// parameters (its metadata: the widget, its generation, its ref) and the
// answer it replays.
type storedAnswer struct {
	metadata map[string]string
	answer   provider.Judgement
}

func newWidgetProvider() *widgetProvider {
	return &widgetProvider{script: map[string][]reply{}, stored: map[string]storedAnswer{}, requests: map[string]int{}, replays: map[string]int{}}
}

// answer scripts what the provider answers the new requests of the widget
// made for ref.
func (p *widgetProvider) answer(ref string, replies ...reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script[ref] = replies
}

// create is a request that makes a widget under key, for the widget its
// metadata names.
func (p *widgetProvider) create(ctx context.Context, key string, metadata map[string]string) (widgetAnswer, error) {
	ref := metadata[operation.MetadataRef]
	p.mu.Lock()
	if refusal := p.nextReply(ref).refusal; refusal != nil {
		p.consume(ref)
		p.mu.Unlock()
		return widgetAnswer{}, refusal
	}
	p.requests[key]++
	gate, meanwhile := p.gateFor(key), p.meanwhile
	p.mu.Unlock()
	if meanwhile != nil {
		meanwhile(metadata)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return widgetAnswer{provider.Judgement{Kind: provider.Ambiguous, Err: fmt.Errorf("no answer: %w", ctx.Err())}}, nil
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.stored[key]; ok {
		if !maps.Equal(s.metadata, metadata) {
			return widgetAnswer{provider.Judgement{Kind: provider.KeyConflict, HTTPStatus: http.StatusBadRequest,
				Err: errors.New("this key was used with other parameters")}}, nil
		}
		p.replays[key]++
		j := s.answer
		j.Replayed = true
		return widgetAnswer{j}, nil
	}
	next := p.nextReply(ref)
	p.consume(ref)
	j := next.answer
	if next.made != "" {
		j.ObjectID = p.make(next.made, metadata).ID
		j.State = next.made
	}
	if next.stores {
		p.stored[key] = storedAnswer{metadata: metadata, answer: j}
	}
	if next.lost {
		return widgetAnswer{transportError().answer}, nil
	}
	return widgetAnswer{j}, nil
}

// nextReply is the reply scripted next for ref; consume takes it.
func (p *widgetProvider) nextReply(ref string) reply {
	replies := p.script[ref]
	if len(replies) == 0 {
		return succeeds()
	}
	return replies[0]
}

func (p *widgetProvider) consume(ref string) {
	if replies := p.script[ref]; len(replies) > 1 {
		p.script[ref] = replies[1:]
	}
}

func (p *widgetProvider) gateFor(key string) chan struct{} {
	if p.hold == nil || (len(p.holdKeys) > 0 && !p.holdKeys[key]) || p.requests[key] <= p.holdAfter {
		return nil
	}
	return p.hold
}

// holdRequests makes the requests under keys (every key if none), past
// the first after of each, wait until release is called.
func (p *widgetProvider) holdRequests(after int, keys ...string) (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gate := make(chan struct{})
	p.hold, p.holdAfter, p.holdKeys = gate, after, map[string]bool{}
	for _, k := range keys {
		p.holdKeys[k] = true
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.hold = nil
			close(gate)
		})
	}
}

// make makes an object at the provider; the caller holds mu.
func (p *widgetProvider) make(status string, metadata map[string]string) *widgetObject {
	p.made++
	obj := &widgetObject{ID: "wob_" + strconv.Itoa(p.made), Status: status, Metadata: metadata}
	p.objects = append(p.objects, obj)
	return obj
}

// madeBefore makes an object with metadata, its success stored under key:
// what an earlier life of a widget, whose rows were since lost, left.
func (p *widgetProvider) madeBefore(key string, metadata map[string]string) *widgetObject {
	p.mu.Lock()
	defer p.mu.Unlock()
	obj := p.make(widgetSucceeded, metadata)
	p.stored[key] = storedAnswer{metadata: metadata, answer: answerOf(obj).judgement}
	clone := *obj
	return &clone
}

// makeObject makes an object no request of ours made (the ledger's strangers).
func (p *widgetProvider) makeObject(status string, metadata map[string]string) *widgetObject {
	p.mu.Lock()
	defer p.mu.Unlock()
	clone := *p.make(status, metadata)
	return &clone
}

// settle moves the object id to status, as the provider does on its own.
func (p *widgetProvider) settle(id, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, obj := range p.objects {
		if obj.ID == id {
			obj.Status = status
		}
	}
}

// forget removes the object id, as if the provider had never made it.
func (p *widgetProvider) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, obj := range p.objects {
		if obj.ID == id {
			p.objects = append(p.objects[:i], p.objects[i+1:]...)
			return
		}
	}
}

// read reads the object id: nil with the HTTP status of a failed read.
func (p *widgetProvider) read(id string) (*widgetObject, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	if p.failReads > 0 {
		p.failReads--
		return nil, http.StatusInternalServerError
	}
	for _, obj := range p.objects {
		if obj.ID == id {
			clone := *obj
			return &clone, http.StatusOK
		}
	}
	return nil, http.StatusNotFound
}

// holdListings makes the next n listings wait for each other.
func (p *widgetProvider) holdListings(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.listingsHeld, p.listingsDue = make(chan struct{}), n
}

// list calls page with every object, two at a time, oldest first.
func (p *widgetProvider) list(ctx context.Context, page func([]*widgetObject) error) error {
	p.mu.Lock()
	p.listings++
	if barrier := p.listingsHeld; barrier != nil {
		if p.listingsDue--; p.listingsDue == 0 {
			close(barrier)
			p.listingsHeld = nil
		}
		p.mu.Unlock()
		select {
		case <-barrier:
		case <-ctx.Done():
			return fmt.Errorf("listing widgets: %w", ctx.Err())
		}
		p.mu.Lock()
	}
	if p.failListings > 0 {
		p.failListings--
		p.mu.Unlock()
		return errors.New("listing widgets: 500 from the provider")
	}
	objects := make([]*widgetObject, len(p.objects))
	for i, obj := range p.objects {
		clone := *obj
		objects[i] = &clone
	}
	p.mu.Unlock()
	for len(objects) > 0 {
		n := min(2, len(objects))
		if err := page(objects[:n]); err != nil {
			return err
		}
		objects = objects[n:]
	}
	return nil
}

// count reads one of the provider's counters under its lock.
func (p *widgetProvider) count(counter func() int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return counter()
}

func (p *widgetProvider) requestsUnder(key string) int {
	return p.count(func() int { return p.requests[key] })
}

func (p *widgetProvider) replaysUnder(key string) int {
	return p.count(func() int { return p.replays[key] })
}

// requestCount counts the requests under every key.
func (p *widgetProvider) requestCount() int {
	return p.count(func() int {
		n := 0
		for _, r := range p.requests {
			n += r
		}
		return n
	})
}

func (p *widgetProvider) objectCount() int { return p.count(func() int { return len(p.objects) }) }

func (p *widgetProvider) readCount() int { return p.count(func() int { return p.reads }) }

func (p *widgetProvider) listingCount() int { return p.count(func() int { return p.listings }) }

// objectsOf are the objects made for widgetID, by their metadata.
func (p *widgetProvider) objectsOf(widgetID string) []widgetObject {
	p.mu.Lock()
	defer p.mu.Unlock()
	var found []widgetObject
	for _, obj := range p.objects {
		if obj.Metadata["widget_id"] == widgetID {
			found = append(found, *obj)
		}
	}
	return found
}

// widgetKind declares widgets to the engine, as a kind's package does.
type widgetKind struct {
	table    operation.Table
	provider *widgetProvider
}

func newWidgetKind(p *widgetProvider) widgetKind {
	return widgetKind{provider: p, table: operation.Table{
		Operation: "widget", Name: "widgets", ProviderIDColumn: "provider_widget_id", ProviderIDLog: "provider_widget_id",
		Columns:           operation.LifecycleColumns + `, amount, status, provider_widget_id`,
		NotReachedMessage: "The widget never reached the provider. Retry the request with the same Idempotency-Key to send it.",
		Resumed:           widgetProcessing, InFlight: []string{widgetProcessing}, NotFound: errors.New("widget not found"),
	}}
}

// strandedReason is what a widget the sweeper found with no job shows.
const strandedReason = "no job was left to send this widget"

func (k widgetKind) spec() operation.Spec[widget, Widget] {
	return operation.Spec[widget, Widget]{
		Where: k.table, Prefixes: []string{"wgt"}, Stranded: strandedReason,
		States: []string{widgetProcessing, widgetSucceeded, widgetFailed, widgetInReconciliation},
		Calls: operation.CallsOf[widgetArgs](k.attempts,
			func(operation.Env) operation.LookUp[Widget, widgetAnswer] { return k.lookUp }),
		Show: func(w Widget) operation.Shown {
			return w.Show(w, w.Status, w.Amount, w.ProviderWidgetID, "", widgetArgs{TenantID: w.TenantID, ID: w.ID})
		},
		LedgerCheck: func(env operation.Env) operation.LedgerPass {
			return operation.NewLedgerChecker(env.Pool, env.Logger, env.Ledger, k.table, widgetAudit{k})
		},
		Events: []string{"widget.updated"},
		Settle: k.settleEvent,
	}
}

// settleEvent answers an event about a widget object: the object read
// again, never the event's copy, recorded on the widget it was made for.
func (k widgetKind) settleEvent(ctx context.Context, env operation.Env, ev operation.Event) (string, error) {
	obj, status := k.provider.read(ev.ObjectID)
	read := provider.Judgement{HTTPStatus: status, Err: fmt.Errorf("HTTP %d", status)}
	if err := k.table.Reread(ev.ObjectID, obj != nil, read); err != nil {
		return "", err
	}
	rows := k.rows(env.Keys)
	_, changed, err := rows.Settle(ctx, env.Pool, ev.Account, obj, func(tx pgx.Tx, w Widget) (Widget, bool, error) {
		return rows.Record(ctx, tx, w, k.verdict(answerOf(obj)))
	})
	return operation.Changed(changed), err
}

func (k widgetKind) rows(keys *idempotency.Store) operation.Rows[Widget] {
	return operation.Rows[Widget]{Table: k.table, Keys: keys, Final: k.final}
}

// attempts send a widget under its provider key, or read the pending
// object an earlier attempt noted.
func (k widgetKind) attempts(env operation.Env) operation.Attempts[Widget, widgetAnswer] {
	rows := k.rows(env.Keys)
	return operation.Attempts[Widget, widgetAnswer]{Rows: rows, Verdict: k.verdict,
		Call: func(ctx context.Context, w Widget) (widgetAnswer, error) {
			if w.ProviderWidgetID != nil {
				obj, status := k.provider.read(*w.ProviderWidgetID)
				if obj == nil {
					return widgetAnswer{provider.Judgement{Kind: provider.Ambiguous, HTTPStatus: status, Err: errors.New("reading the widget failed")}}, nil
				}
				return answerOf(obj), nil
			}
			return k.provider.create(ctx, w.ProviderIdempotencyKey, k.table.Metadata(w.Entry()))
		},
		Pending: func(ctx context.Context, db operation.Querier, w Widget, out widgetAnswer) error {
			return rows.NotePending(ctx, db, w, out.Judge().ObjectID, "")
		}}
}

// verdict is what a final answer makes of a widget.
func (k widgetKind) verdict(out widgetAnswer) func(Widget) (operation.Verdict, error) {
	return func(w Widget) (operation.Verdict, error) {
		j := out.Judge()
		switch j.Kind {
		case provider.Succeeded:
			return operation.Verdict{Status: widgetSucceeded, ProviderID: j.ObjectID}, nil
		case provider.Declined, provider.Rejected:
			return operation.Verdict{Status: widgetFailed, ProviderID: j.ObjectID, FailureCode: j.Code,
				FailureMessage: "The provider refused the widget."}, nil
		}
		return operation.Verdict{}, k.table.NotFinal(w.ID, j.Kind)
	}
}

// final writes the widget's receipt and returns what its key replays.
func (k widgetKind) final(ctx context.Context, tx pgx.Tx, w Widget) (idempotency.Response, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO widget_receipts (widget_id, status) VALUES ($1, $2)`, w.ID, w.Status); err != nil {
		return idempotency.Response{}, fmt.Errorf("write the receipt of widget %s: %w", w.ID, err)
	}
	return finalResponse(w)
}

// finalResponse is what a widget's key replays once it is final: 201 with
// the widget, or 422 with it when the provider refused it.
func finalResponse(w Widget) (idempotency.Response, error) {
	resp, err := operation.Created(w, widgetLocation(w.ID))
	if w.Status == widgetFailed {
		resp.StatusCode = http.StatusUnprocessableEntity
	}
	return resp, err
}

func widgetLocation(id string) string { return "/v1/widgets/" + id }

// lookUp reads a widget's object once known, else finds it among the
// provider's objects by its metadata.
func (k widgetKind) lookUp(ctx context.Context, c Widget, settled bool) (widgetAnswer, operation.Look) {
	if c.ProviderWidgetID != nil {
		obj, status := k.provider.read(*c.ProviderWidgetID)
		if obj == nil {
			err := fmt.Errorf("reading the widget: HTTP %d", status)
			return widgetAnswer{provider.Judgement{Kind: provider.Ambiguous, HTTPStatus: status, Err: err}},
				operation.Look{Note: "reading the widget failed", Err: err}
		}
		read := answerOf(obj)
		return read, operation.Looked(read, "")
	}
	list := func(page func([]*widgetObject) error) error { return k.provider.list(ctx, page) }
	obj, look := operation.FindOne(list, operation.MadeBy[*widgetObject](k.table, c.Entry()), settled)
	if obj == nil {
		return widgetAnswer{provider.Judgement{Kind: provider.Ambiguous, Err: look.Err}}, look
	}
	read := answerOf(obj)
	look = operation.Looked(read, "")
	look.ProviderID = obj.ID
	return read, look
}

// widgetAudit is the widgets' side of the ledger check.
type widgetAudit struct{ kind widgetKind }

func (a widgetAudit) List(ctx context.Context, _ provider.ListWindow, page func(string, []*widgetObject) error) error {
	return a.kind.provider.list(ctx, func(objs []*widgetObject) error { return page("", objs) })
}

func (a widgetAudit) Retrieve(_ context.Context, _ Widget, id string) operation.Read[*widgetObject] {
	obj, status := a.kind.provider.read(id)
	if obj == nil {
		return operation.Read[*widgetObject]{Kind: provider.Ambiguous, HTTPStatus: status, Err: fmt.Errorf("read provider widget %s: HTTP %d", id, status)}
	}
	return operation.ReadOf(obj, answerOf(obj).judgement)
}

// Compare finds an object naming a widget we do not know, and one whose
// status contradicts its widget's; an object naming none is not ours.
func (a widgetAudit) Compare(_ context.Context, obj *widgetObject, matched *Widget, _ operation.LedgerCheckConfig) ([]operation.Finding, error) {
	_, named := a.kind.table.Named(obj.Metadata)
	switch {
	case matched == nil && named == "":
		return nil, nil
	case matched == nil:
		return []operation.Finding{widgetFinding("unknown_widget", named, obj, "provider widget "+obj.ID+" names widget "+named+", which we do not know")}, nil
	case matched.Status != obj.Status && matched.Status != widgetProcessing && matched.Status != widgetInReconciliation:
		return []operation.Finding{widgetFinding("widget_mismatch", matched.ID, obj, "widget "+matched.ID+" is "+matched.Status+", its provider widget "+obj.Status)}, nil
	}
	return nil, nil
}

func (a widgetAudit) Confirm(w Widget, read operation.Read[*widgetObject]) []operation.Finding {
	if read.Obj.Status == w.Status {
		return nil
	}
	return []operation.Finding{widgetFinding("widget_mismatch", w.ID, read.Obj, "widget "+w.ID+" is "+w.Status+", its provider widget "+read.Obj.Status)}
}

func widgetFinding(kind, widgetID string, obj *widgetObject, reason string) operation.Finding {
	return operation.Finding{Disagreement: ledger.Disagreement{Kind: kind, OperationID: widgetID, ProviderObjectID: obj.ID, Reason: reason},
		Evidence: map[string]any{"provider_widget": obj}}
}

// bench is one test's world: a database of its own with the widgets'
// table and a tenant, the keys, the scripted provider, and the engine's
// view of them all (env).
type bench struct {
	ctx      context.Context
	pool     *pgxpool.Pool
	dbURL    string
	tenantID string
	keys     *idempotency.Store
	provider *widgetProvider
	kind     widgetKind
	env      operation.Env
	// jobs inserts the widgets' jobs; the workers are started apart.
	jobs *outbox.Client
	deps operation.Deps
}

// newBench makes a bench whose engine runs with the tests' short timers,
// then tune's.
func newBench(t *testing.T, tune ...func(*operation.Env)) *bench {
	t.Helper()
	pool, dbURL := pgtest.NewPool(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, widgetsDDL)
	require.NoError(t, err)
	b := &bench{ctx: ctx, pool: pool, dbURL: dbURL, tenantID: id.New("ten"), keys: idempotency.NewStore(idempotency.Config{}),
		provider: newWidgetProvider()}
	b.kind = newWidgetKind(b.provider)
	_, err = pool.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ($1, $1)`, b.tenantID)
	require.NoError(t, err)
	logger := slog.New(slog.DiscardHandler)
	// The calls' timeout (8s) outlasts the requests the tests hold at the
	// provider on a loaded machine; the tests that wait for a window to
	// settle shorten it.
	b.env = operation.Env{Pool: pool, Keys: b.keys, Logger: logger,
		Worker:    operation.WorkerConfig{JobTimeout: 10 * time.Second, PollInterval: 20 * time.Millisecond, RecordTimeout: 2 * time.Second},
		Reconcile: operation.ReconcileConfig{Settle: 50 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond},
		Sweep:     operation.SweepConfig{Grace: 50 * time.Millisecond}}
	for _, f := range tune {
		f(&b.env)
	}
	b.jobs, err = outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	b.deps = operation.Deps{DB: pool, Keys: b.keys, Outbox: outbox.New(b.jobs), Logger: logger}
	return b
}

// startWorker starts a worker process of its own: River working the
// widgets' jobs as cmd/worker works a kind's, at most slots at once; with
// passes, the kind's reconciler and sweeper run every 100ms too.
func (b *bench) startWorker(t *testing.T, slots int, passes bool) *outbox.Client {
	t.Helper()
	workers := river.NewWorkers()
	periodic := workertest.Start(t, workers, b.env, 100*time.Millisecond, b.kind.spec())
	if !passes {
		periodic = nil
	}
	client, err := outbox.NewWorkerClient(b.pool, outbox.WorkerConfig{Workers: workers, Concurrency: slots, PeriodicJobs: periodic,
		JobTimeout: b.env.Worker.MaxAttemptDuration(), RescueStuckJobsAfter: time.Minute, FetchPollInterval: 20 * time.Millisecond,
		Retry: outbox.RetryPolicy{Base: 10 * time.Millisecond, Max: 40 * time.Millisecond}, Logger: b.env.Logger})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.WithoutCancel(b.ctx)))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.StopAndCancel(stopCtx)
	})
	return client
}

// widgetRequest is the client's request, as its fingerprint hashes it.
type widgetRequest struct {
	Amount int64 `json:"amount"`
}

func (b *bench) request(t *testing.T, clientKey string, amount int64) idempotency.Request {
	t.Helper()
	fingerprint, err := idempotency.Fingerprint(http.MethodPost, "/v1/widgets", widgetRequest{amount})
	require.NoError(t, err)
	return idempotency.Request{TenantID: b.tenantID, Key: clientKey, Method: http.MethodPost, Path: "/v1/widgets", Fingerprint: fingerprint,
		LockResource: b.kind.table.LockResource}
}

// order is the client's POST /v1/widgets under clientKey, as a kind's
// endpoint runs it on the engine: in the key's transaction, a new widget
// and its job, or, for a key re-acquired, its widget resumed under the
// next generation and a new job.
func (b *bench) order(t *testing.T, clientKey string, amount int64) idempotency.Result {
	t.Helper()
	rows := b.kind.rows(b.keys)
	res, err := b.keys.Run(b.ctx, b.pool, b.request(t, clientKey, amount),
		func(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt) (idempotency.Outcome, error) {
			w, resumed, err := rows.Resumed(ctx, tx, attempt, nil)
			if !resumed {
				w = Widget{Lifecycle: operation.NewLifecycle(b.kind.table, "wgt", attempt.Request, nil), Amount: amount, Status: widgetProcessing}
				_, err = tx.Exec(ctx, `INSERT INTO widgets (id, tenant_id, idempotency_key, amount, status, provider_idempotency_key, oncepay_ref)
					VALUES ($1, $2, $3, $4, $5, $6, $7)`, w.ID, w.TenantID, w.IdempotencyKey, w.Amount, w.Status, w.ProviderIdempotencyKey, w.Ref)
			}
			if err != nil {
				return idempotency.Outcome{}, fmt.Errorf("write widget: %w", err)
			}
			return b.deps.Accept(ctx, tx, w, "widget", widgetArgs{TenantID: w.TenantID, ID: w.ID}, w, widgetLocation(w.ID), resumed)
		})
	require.NoError(t, err)
	return res
}

// newWidget orders a widget under a key of its own, the provider scripted
// first to answer its requests with replies, and returns it as written.
func (b *bench) newWidget(t *testing.T, replies ...reply) Widget {
	t.Helper()
	clientKey := id.New("key")
	ref := b.refOf(t, clientKey, widgetAmount)
	b.provider.answer(ref, replies...)
	res := b.order(t, clientKey, widgetAmount)
	require.Equal(t, idempotency.Execute, res.Kind)
	w := b.widget(t, res.Record.ResourceID)
	require.Equal(t, ref, operation.Deref(w.Ref), "the widget's ref is its request's")
	return w
}

// widgetAmount is what the tests' widgets cost.
const widgetAmount = 1500

// refOf is the ref of the widget the client's request under clientKey
// makes: the same for every life of its rows.
func (b *bench) refOf(t *testing.T, clientKey string, amount int64) string {
	t.Helper()
	return operation.RequestRef("widget", b.tenantID, clientKey, b.request(t, clientKey, amount).Fingerprint)
}

func (b *bench) widget(t *testing.T, widgetID string) Widget {
	t.Helper()
	w, err := b.kind.rows(b.keys).Load(b.ctx, b.pool, b.tenantID, widgetID)
	require.NoError(t, err)
	return w
}

// keyOf is w's client key as stored.
func (b *bench) keyOf(t *testing.T, w Widget) idempotency.Record {
	t.Helper()
	rec, err := b.keys.Get(b.ctx, b.pool, b.tenantID, w.IdempotencyKey)
	require.NoError(t, err)
	return rec
}

// jobsOf are w's jobs, oldest first.
func (b *bench) jobsOf(t *testing.T, w Widget) []operation.Job {
	t.Helper()
	jobs, err := operation.JobsOf(b.ctx, b.pool, widgetArgs{TenantID: w.TenantID, ID: w.ID})
	require.NoError(t, err)
	return jobs
}

// lastJob is w's newest job.
func (b *bench) lastJob(t *testing.T, w Widget) operation.Job {
	t.Helper()
	jobs := b.jobsOf(t, w)
	require.NotEmpty(t, jobs, "widget %s has no job", w.ID)
	return jobs[len(jobs)-1]
}

// await waits until w is in status and its newest job is finalized, and
// returns it.
func (b *bench) await(t *testing.T, w Widget, status string) Widget {
	t.Helper()
	require.Eventually(t, func() bool {
		w = b.widget(t, w.ID)
		state := b.lastJob(t, w).State
		return w.Status == status && (state == "completed" || state == "cancelled" || state == "discarded")
	}, 20*time.Second, 10*time.Millisecond, "widget %s never became %s", w.ID, status)
	return w
}

// receipts counts the final answers committed for a widget.
func (b *bench) receipts(t *testing.T, widgetID string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM widget_receipts WHERE widget_id = $1`, widgetID)
}

func (b *bench) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

// exec runs a statement of the test's own.
func (b *bench) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	require.NoError(t, err)
}

// requireRecorded asserts that w was recorded final in status, once: its
// row, a receipt, its key completed with exactly the answer its final
// response makes of the row as it stands, and its job completed.
func (b *bench) requireRecorded(t *testing.T, w Widget, status string) Widget {
	t.Helper()
	w = b.widget(t, w.ID)
	require.Equal(t, status, w.Status, "widget %s", w.ID)
	require.Nil(t, w.ReconcileAfter, "nothing left to reconcile")
	require.Equal(t, 1, b.receipts(t, w.ID), "one final answer committed")
	rec := b.keyOf(t, w)
	require.Equal(t, idempotency.StatusCompleted, rec.Status)
	want, err := finalResponse(w)
	require.NoError(t, err)
	require.NotNil(t, rec.Response)
	require.Equal(t, want.StatusCode, rec.Response.StatusCode)
	require.Equal(t, want.Header, rec.Response.Header)
	require.JSONEq(t, string(want.Body), string(rec.Response.Body))
	require.Equal(t, "completed", b.lastJob(t, w).State)
	return w
}

// requireHandedOver asserts that w is in reconciliation, due at once, its
// key unknown, for reason, its provider key spent or not; and returns it.
func (b *bench) requireHandedOver(t *testing.T, w Widget, reason string, spent bool) Widget {
	t.Helper()
	w = b.widget(t, w.ID)
	require.Equal(t, widgetInReconciliation, w.Status)
	require.Contains(t, operation.Deref(w.FailureMessage), reason)
	require.NotNil(t, w.ReconcileAfter)
	require.Zero(t, w.ReconcileAttempts)
	require.Equal(t, spent, w.ProviderKeySpentAt != nil, "provider key spent")
	require.Equal(t, idempotency.StatusUnknown, b.keyOf(t, w).Status)
	require.Zero(t, b.receipts(t, w.ID))
	var handedOver *time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT handed_over_at FROM widgets WHERE id = $1`, w.ID).Scan(&handedOver))
	require.NotNil(t, handedOver)
	return w
}

// reconciler is the widgets' reconciler as the kind's passes run it,
// with cfg.
func (b *bench) reconciler(cfg operation.ReconcileConfig) *operation.Reconciler[Widget, widgetAnswer] {
	env := b.env
	env.Reconcile = cfg
	return operation.NewReconciler(b.pool, b.keys, b.env.Logger, cfg, b.kind.table, b.kind.attempts(env), b.kind.lookUp)
}

// keyOfGeneration is the provider key RefKey derives for w's generation.
func keyOfGeneration(w Widget, generation int) string { return operation.RefKey(*w.Ref, generation) }

// decode reads a stored answer's body.
func decode(t *testing.T, body []byte) Widget {
	t.Helper()
	var w Widget
	require.NoError(t, json.Unmarshal(body, &w))
	return w
}
