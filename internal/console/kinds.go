package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// operator is a kind's reach for the console's reads: no provider, it
// never looks anything up.
func (c *server) operator(kind operation.Kind) operation.Operator {
	return kind.Operator(operation.Env{Pool: c.cfg.Pool, Keys: c.cfg.Keys, Logger: slog.New(slog.DiscardHandler)})
}

// operations lists one registered kind's operations, newest first.
func (c *server) operations(w http.ResponseWriter, r *http.Request) {
	name, status := r.URL.Query().Get("kind"), r.URL.Query().Get("status")
	all := c.cfg.Kinds
	i := slices.IndexFunc(all, func(k operation.Kind) bool { return k.Name() == name })
	if i < 0 {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("kind %q is not one of %v", name, all.Names()))
		return
	}
	list, err := c.operator(all[i]).List(r.Context(), status, 100)
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	c.render(w, r, http.StatusOK, "operations.html", map[string]any{"Title": "Operations: " + name, "Kind": name,
		"Kinds": all.Names(), "Status": status, "Operations": list})
}

// operation is one operation of any kind, with its timeline.
func (c *server) operation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	kind, ok := c.cfg.Kinds.Of(id)
	if !ok {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no operation %q", id))
		return
	}
	op, err := c.operator(kind).Find(r.Context(), id)
	if errors.Is(err, kind.Table().NotFound) {
		c.fail(w, r, http.StatusNotFound, err)
		return
	}
	tenantID := op.TenantID
	var key *idempotency.Record
	if err == nil {
		rec, kerr := c.cfg.Keys.Get(r.Context(), c.cfg.Pool, tenantID, op.IdempotencyKey)
		if kerr == nil {
			key = &rec
		} else if !errors.Is(kerr, idempotency.ErrKeyNotFound) {
			err = kerr
		}
	}
	var jobs []operation.Job
	var events []webhooks.Stored
	if err == nil {
		jobs, err = operation.JobsOf(r.Context(), c.cfg.Pool, op.AllJobs()...)
	}
	if err == nil && op.ProviderID != nil {
		events, err = webhooks.About(r.Context(), c.cfg.Pool, *op.ProviderID)
	}
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	c.render(w, r, http.StatusOK, "operation.html", map[string]any{"Title": kind.Name() + " " + id, "Op": op, "Kind": kind.Name(),
		"Key": key, "Jobs": jobs, "Timeline": operationTimeline(op, kind.Name(), key, jobs, events)})
}

// operationTimeline puts what is recorded of an operation in the order it
// happened: its key, its acceptance, its jobs' attempts, its provider
// calls, the provider's events about its object, its hand-off to
// reconciliation and the reconciler's settlement, its state now.
func operationTimeline(op operation.Shown, kind string, key *idempotency.Record, jobs []operation.Job, events []webhooks.Stored) []Entry {
	var out []Entry
	add := func(at time.Time, kind, what, detail string) {
		out = append(out, Entry{At: at.UTC(), Kind: kind, What: what, Detail: detail})
	}
	accepted := op.CreatedAt
	if key != nil {
		detail := "Idempotency-Key " + key.Key + ", now " + string(key.Status)
		if key.Response != nil {
			detail += ", answering " + strconv.Itoa(key.Response.StatusCode)
		}
		add(key.CreatedAt, "key", "Key reserved", detail)
		// Committed in the key's transaction, as a payment is (timeline).
		if key.CreatedAt.Sub(op.CreatedAt).Abs() < time.Second {
			accepted = key.CreatedAt
		}
	}
	add(accepted, "operation", "Accepted", "its job queued in the same transaction")
	addJobs(jobs, op.CreatedAt, add)
	summary := operation.Summary{Operation: kind, ID: op.ID, Status: op.Status, Generation: op.Generation, Account: op.Account,
		Calls: op.Calls, HandedOverAt: op.HandedOverAt, ReconciledAt: op.ReconciledAt, HandOverReason: op.HandOverReason}
	addCalls(summary, "", add)
	for _, e := range events {
		what := "Webhook " + e.Type + " received"
		if e.ObjectStatus != nil {
			what += ": " + *e.ObjectStatus + " at the provider"
		}
		add(e.ReceivedAt, "webhook", what, fmt.Sprintf("event %s by %s, result %s", e.ID, e.Source, formatString(e.Result)))
	}
	addHandOff(summary, "", add)
	var now []string
	if op.ProviderID != nil {
		now = append(now, "provider object "+*op.ProviderID)
	}
	if op.FailureCode != "" {
		now = append(now, "failure "+strings.TrimSuffix(op.FailureCode+": "+op.FailureMessage, ": "))
	}
	if op.ReconciledAt != nil {
		add(outcome(summary, *op.ReconciledAt, op.Status, strings.Join(now, ", ")))
	}
	add(op.UpdatedAt, "provider", "Now "+op.Status, strings.Join(now, ", "))
	slices.SortStableFunc(out, func(a, b Entry) int { return a.At.Compare(b.At) })
	return out
}
