package idempotency

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/platform/respond"
)

// ReplayedHeader marks an answer that repeats a stored response.
const ReplayedHeader = "Idempotent-Replayed"

// MaxWait caps the wait a client may ask for with Prefer: wait=N.
const MaxWait = 30 * time.Second

// DB is what an Endpoint needs of the database: a pool.
type DB interface {
	TxBeginner
	Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Endpoint serves one idempotent POST endpoint. It parses the key, lets
// Decode validate the body, fingerprints the validated request, runs Execute
// under the key in one transaction, honours Prefer: wait, and answers: the
// stored response (marked Idempotent-Replayed on a replay), or a problem.
type Endpoint[T any] struct {
	Store  *Store
	DB     DB
	Logger *slog.Logger
	// TenantID returns the authenticated tenant: keys are scoped to it.
	TenantID func(*http.Request) string
	// Decode reads and validates the request. Its *problem.Error is
	// answered before the key is touched, so a client can fix the request
	// and send it again with the same key.
	Decode func(w http.ResponseWriter, r *http.Request) (T, error)
	// Execute does the operation's writes inside the key's transaction.
	Execute func(ctx context.Context, tx pgx.Tx, attempt Attempt, req T) (Outcome, error)
	// Fresh, if set, prepares the operation of a key this process has not
	// seen without reading anything (see Fresh): such a key then costs one
	// round trip. Execute still serves every other case.
	Fresh func(ctx context.Context, attempt Attempt, req T) (Outcome, bool, error)
	// LockResource is copied into every Request: see Request.LockResource.
	LockResource func(ctx context.Context, tx pgx.Tx, resourceID string) error
}

func (e *Endpoint[T]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := ParseKey(r.Header)
	if err != nil {
		respond.Problem(w, r, e.Logger, err)
		return
	}
	tenantID := e.TenantID(r)
	// A retry of a key seen here keeps its bytes' digest: the same bytes
	// again are answered from memory before they are decoded.
	var exact *[sha256.Size]byte
	if e.Store.replays.Digests() && e.Store.recent.seen(tenantID, key) {
		exact = exactDigest(r)
	}
	res, ok := e.Store.replays.ReplayExact(tenantID, key, exact)
	if !ok {
		if res, ok = e.decide(w, r, tenantID, key, exact); !ok {
			return
		}
	}
	if res.Kind == Execute || res.Kind == Replay {
		e.Store.recent.add(tenantID, key)
	}
	// A new operation's line is the one kept in production: it ties the
	// request to what it created.
	if res.Kind == Execute {
		e.Logger.InfoContext(r.Context(), "idempotency decision", slog.String("tenant_id", tenantID), slog.String("decision", res.Kind.String()),
			slog.String("resource_id", res.Record.ResourceID))
	} else {
		e.Logger.DebugContext(r.Context(), "idempotency decision", slog.String("tenant_id", tenantID), slog.String("decision", res.Kind.String()))
	}
	if e.Store.cfg.Observe != nil {
		e.Store.cfg.Observe(tenantID, res.Kind)
	}

	switch res.Kind {
	case Execute, Replay:
		e.answer(w, r, res, PreferredWait(r.Header))
	case InProgress:
		respond.Problem(w, r, e.Logger, &problem.Error{
			Type:       problem.IdempotencyKeyInUse,
			Detail:     "Another request with this Idempotency-Key is still being processed.",
			RetryAfter: e.Store.cfg.InProgressRetryAfter,
		})
	case Mismatch:
		respond.Problem(w, r, e.Logger, problem.New(problem.IdempotencyKeyMismatch,
			"This Idempotency-Key was first used with a different request to %s %s; nothing was done for this one. "+
				"A key names one operation: send this request with a new key, or resend the first request unchanged to get its answer.",
			res.Record.Method, res.Record.Path))
	case Unresolved:
		e.writeUnresolved(w, r, res.Record)
	case Expired:
		e.writeExpired(w, r, res.Record)
	}
}

// decide decodes the request and decides what its key calls for, in one
// straight path: the plain step last (the key's transaction), each fast
// path before it answering only what the next would, and each able to be
// off (fastpath, Config). It answers a request that cannot be decided
// itself, and then returns false.
func (e *Endpoint[T]) decide(w http.ResponseWriter, r *http.Request, tenantID, key string, exact *[sha256.Size]byte) (Result, bool) {
	req, err := e.Decode(w, r)
	if err != nil {
		respond.Problem(w, r, e.Logger, err)
		return Result{}, false
	}
	fingerprint, err := Fingerprint(r.Method, r.URL.Path, req)
	if err != nil {
		respond.Problem(w, r, e.Logger, err)
		return Result{}, false
	}
	ireq := Request{TenantID: tenantID, Key: key, Method: r.Method, Path: r.URL.Path, Fingerprint: fingerprint, LockResource: e.LockResource}
	res, ok := e.Store.replays.Replay(ireq, exact) // a completed response in memory
	if !ok {
		res, ok = e.Store.replayCommitted(r.Context(), e.DB, ireq) // a committed row, read outside a transaction
	}
	if !ok {
		res, ok, err = e.inOneRoundTrip(r.Context(), ireq, req) // a new key's writes with its row
	}
	if !ok && err == nil {
		res, err = e.inTransaction(r.Context(), ireq, req) // the plain path: the key's transaction
	}
	if err != nil {
		respond.Problem(w, r, e.Logger, err)
		return Result{}, false
	}
	if res.Kind == Replay {
		e.Store.replays.Remember(res.Record, exact)
	}
	return res, true
}

// inOneRoundTrip runs a new key's operation with the key's row in one
// round trip (Fresh), for a key this process has not seen; ok is false
// when it does not apply.
func (e *Endpoint[T]) inOneRoundTrip(ctx context.Context, ireq Request, req T) (Result, bool, error) {
	if e.Fresh == nil || !e.Store.freshKeys() || e.Store.recent.seen(ireq.TenantID, ireq.Key) {
		return Result{}, false, nil
	}
	return e.Store.runFresh(ctx, e.DB, ireq, func(ctx context.Context, a Attempt) (Outcome, bool, error) {
		return e.Fresh(ctx, a, req)
	})
}

// inTransaction runs the operation under the key in the key's transaction
// (Store.Run): the path every request can take.
func (e *Endpoint[T]) inTransaction(ctx context.Context, ireq Request, req T) (Result, error) {
	return e.Store.Run(ctx, e.DB, ireq, func(ctx context.Context, tx pgx.Tx, a Attempt) (Outcome, error) {
		return e.Execute(ctx, tx, a, req)
	})
}

// writeExpired refuses a request whose key is a tombstone, naming what the
// original request created so the client can look up its outcome there.
func (e *Endpoint[T]) writeExpired(w http.ResponseWriter, r *http.Request, rec Record) {
	pe := &problem.Error{
		Type: problem.IdempotencyKeyExpired,
		Detail: "This Idempotency-Key was first used longer ago than its retention, so its response is no longer stored; " +
			"nothing was done for this request. Use a new key for a new operation.",
	}
	if rec.ResourceID != "" {
		pe.Extensions = map[string]any{"resource_id": rec.ResourceID}
	}
	respond.Problem(w, r, e.Logger, pe)
}

// writeUnresolved answers a key whose outcome is being reconciled, naming
// what its request created and where to read it (the accepted answer's
// Location), so that a client can follow it meanwhile.
func (e *Endpoint[T]) writeUnresolved(w http.ResponseWriter, r *http.Request, rec Record) {
	pe := &problem.Error{
		Type:       problem.IdempotencyOutcomeUnknown,
		Detail:     "The outcome of the operation started with this Idempotency-Key is being reconciled with the provider.",
		RetryAfter: e.Store.cfg.UnknownRetryAfter,
	}
	if rec.ResourceID != "" {
		pe.Extensions = map[string]any{"resource_id": rec.ResourceID}
	}
	if rec.Response != nil && rec.Response.Header["Location"] != "" {
		w.Header().Set("Location", rec.Response.Header["Location"])
	}
	respond.Problem(w, r, e.Logger, pe)
}

// answer writes the stored response, after waiting for the operation to
// finish if the client asked to and it has not.
func (e *Endpoint[T]) answer(w http.ResponseWriter, r *http.Request, res Result, wait time.Duration) {
	rec := res.Record
	replayed := res.Replayed
	if wait > 0 && rec.Status == StatusProcessing {
		w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(wait/time.Second)))
		waited, err := e.Store.Await(r.Context(), e.DB, rec.TenantID, rec.Key, time.Now().Add(wait))
		switch {
		case err != nil:
			// The operation is committed; a failed wait must not turn its
			// acceptance into an error. Answer what was stored.
			e.Logger.WarnContext(r.Context(), "waiting for operation failed", slog.String("tenant_id", rec.TenantID), slog.Any("error", err))
		case waited.Status == StatusUnknown:
			e.writeUnresolved(w, r, waited)
			return
		case waited.Status == StatusFailedRetryable:
			// The stored 202 no longer holds: the operation stopped without
			// taking effect, and waiting longer will not change that. Only a
			// new request with the key resumes it.
			respond.Problem(w, r, e.Logger, &problem.Error{
				Type: problem.IdempotencyRetryNeeded,
				Detail: "The operation started with this Idempotency-Key provably never took effect downstream. " +
					"Send the same request with the same key again: it will run again, and still at most once.",
				RetryAfter: e.Store.cfg.InProgressRetryAfter,
			})
			return
		case waited.Status == StatusCompleted && waited.Response != nil:
			rec = waited
		}
	}
	if rec.Response == nil {
		// Cannot happen: a key is saved with its response in the
		// transaction that reserved it. Answer as in progress, not 500.
		respond.Problem(w, r, e.Logger, &problem.Error{Type: problem.IdempotencyKeyInUse, RetryAfter: e.Store.cfg.InProgressRetryAfter})
		return
	}
	WriteResponse(w, *rec.Response, replayed)
}

// WriteResponse writes a stored response; replayed marks it as a replay.
func WriteResponse(w http.ResponseWriter, resp Response, replayed bool) {
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	if replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(resp.Body)
}

// PreferredWait parses RFC 7240 Prefer headers for wait=N (seconds), capped
// at MaxWait. A malformed or absent preference means no wait: preferences are
// hints, and RFC 7240 says to ignore what cannot be honoured.
func PreferredWait(h http.Header) time.Duration {
	for _, header := range h.Values("Prefer") {
		for pref := range strings.SplitSeq(header, ",") {
			// Parameters after ';' do not apply to wait.
			token, _, _ := strings.Cut(pref, ";")
			name, value, ok := strings.Cut(token, "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			value = strings.Trim(strings.TrimSpace(value), `"`)
			if value == "" || len(value) > 9 {
				continue
			}
			secs, err := strconv.Atoi(value)
			if err != nil || secs <= 0 {
				continue
			}
			return min(time.Duration(secs)*time.Second, MaxWait)
		}
	}
	return 0
}
