package operation

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/tenant"
)

// Deps is what the HTTP side of every operation kind is built from. A
// kind's Service embeds it, so one value serves them all.
type Deps struct {
	DB     idempotency.DB
	Keys   *idempotency.Store
	Outbox *outbox.Outbox
	Logger *slog.Logger
	// RetryAfter is the Retry-After of a 202: when a client that did not
	// ask to wait should look again. Defaults to 1s.
	RetryAfter time.Duration
	// ReadTimeout bounds the database work of a read, so an unresponsive
	// database yields a prompt 503. Defaults to 5s.
	ReadTimeout time.Duration
}

// Endpoint is the handler of a kind's operation under an Idempotency-Key.
// Everything about the key (400 without one, replay, 409 while in flight,
// 422 on a mismatch, Prefer: wait, 5xx never stored) is the idempotency
// Endpoint's; the kind brings only its body's rules (decode), its writes
// under the key (execute) and, for a re-acquired key, the lock its
// resource takes before the key's (lock). A kind whose new operation reads
// nothing sets the Endpoint's Fresh too.
func Endpoint[Req any](d Deps,
	decode func(http.ResponseWriter, *http.Request) (Req, error),
	execute func(context.Context, pgx.Tx, idempotency.Attempt, Req) (idempotency.Outcome, error),
	lock func(ctx context.Context, tx pgx.Tx, resourceID string) error,
) *idempotency.Endpoint[Req] {
	return &idempotency.Endpoint[Req]{Store: d.Keys, DB: d.DB, Logger: d.Logger, TenantID: tenant.IDFromRequest,
		Decode: decode, Execute: execute, LockResource: lock}
}

// Accepted is the 202 of an operation not yet final, with d's Retry-After.
func (d Deps) Accepted(v any, location string) (idempotency.Response, error) {
	return Accepted(v, location, d.retryAfter())
}

// Accept ends a kind's create under the client's key: it queues op's job
// and answers 202 with view at location, the answer the key replays until
// the job records the final one. what names the operation on the log line.
func (d Deps) Accept(ctx context.Context, tx pgx.Tx, op operationRow, what string, job river.JobArgs, view any, location string,
	resumed bool) (idempotency.Outcome, error) {
	if _, err := d.Outbox.InsertTx(ctx, tx, job); err != nil {
		return idempotency.Outcome{}, err
	}
	e := op.Entry()
	d.Logger.InfoContext(ctx, what+" accepted", append(e.LogAttrs, slog.String("tenant_id", e.TenantID), slog.String(what+"_id", e.ID),
		slog.Bool("resumed", resumed))...)
	resp, err := d.Accepted(view, location)
	return idempotency.Outcome{Status: idempotency.StatusProcessing, ResourceID: e.ID, Response: resp}, err
}

func (d Deps) retryAfter() time.Duration { return cmp.Or(d.RetryAfter, time.Second) }

// ReadAbout reads a request about the object its path's {id} names (its
// ids start with prefix; noun names it in the 404 of an id that is not
// one) whose body is optional: an empty body is the empty object.
func ReadAbout(w http.ResponseWriter, r *http.Request, prefix, noun string) (objectID string, body jsonbody.Object, err error) {
	objectID = chi.URLParam(r, "id")
	if !id.Valid(prefix, objectID) {
		return "", jsonbody.Object{}, problem.New(problem.NotFound, "No %s %q.", noun, objectID)
	}
	body, err = jsonbody.ReadOptional(w, r)
	return objectID, body, err
}

// newResource is how a kind's operations are read over HTTP.
func newResource[T any](d Deps, noun, prefix string, notFound error) resource[T] {
	return resource[T]{Noun: noun, Prefix: prefix, NotFound: notFound, Logger: d.Logger, Timeout: d.ReadTimeout}
}
