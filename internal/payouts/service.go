package payouts

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/platform/money"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

// service serves the payouts' endpoints.
type service struct{ operation.Deps }

// createRequest is a validated payout; its JSON encoding is what the
// idempotency fingerprint hashes.
type createRequest struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description,omitempty"`
}

// errNoAccount refuses a tenant without a connected account, stored
// nowhere: once an operator gives it one, the same request works.
var errNoAccount = problem.New(problem.PayoutsNeedAccount,
	"This tenant has no connected account: the platform's balance is not yours to pay out.")

func decodeCreate(w http.ResponseWriter, r *http.Request) (createRequest, error) {
	obj, err := jsonbody.Read(w, r)
	if err != nil {
		return createRequest{}, err
	}
	v := jsonbody.NewValidator(obj)
	return createRequest{
		Amount:      v.Integer("amount", true, money.MinAmount, money.MaxAmount),
		Currency:    v.String("currency", jsonbody.StringRule{Required: true, MaxLen: 3, Check: money.CheckCurrency}),
		Description: v.String("description", jsonbody.StringRule{MaxLen: 255}),
	}, v.Err()
}

// create writes the payout (or resumes the one proven never sent) and its
// job, and answers 202.
func (s service) create(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt, req createRequest) (idempotency.Outcome, error) {
	tenantID, rs := attempt.Request.TenantID, rowsOf(s.Keys)
	p, resumed, err := rs.Resumed(ctx, tx, attempt, nil)
	if !resumed {
		p, err = insert(ctx, tx, Payout{Lifecycle: operation.NewLifecycle(table, IDPrefix, attempt.Request, nil),
			Money: money.Money{Amount: req.Amount, Currency: req.Currency}, Description: &req.Description, Status: StatusProcessing})
	}
	if err != nil {
		return idempotency.Outcome{}, err
	}
	return s.Accept(ctx, tx, p, "payout", args{TenantID: tenantID, ID: p.ID}, p, location(p), resumed)
}

func location(p Payout) string { return "/v1/payouts/" + p.ID }

// finalResponse is what a retry of the client's POST replays once the
// provider answered: 201 with the payout it made, or 422 payout-failed.
func finalResponse(_ context.Context, _ pgx.Tx, p Payout) (idempotency.Response, error) {
	if p.Status != StatusFailed && p.Status != StatusCanceled {
		return operation.Created(p, location(p))
	}
	code, message := p.Failure()
	return operation.Refused(&problem.Error{Type: problem.PayoutFailed, Detail: fmt.Sprintf("Payout %s is %s (%s): %s", p.ID, p.Status, code, message),
		Extensions: map[string]any{"payout_id": p.ID, "payout_status": p.Status, "failure_code": code}}, location(p)), nil
}

// cancelRequest is a cancel: the path names the payout; the body is {}.
type cancelRequest struct {
	PayoutID string `json:"-"`
}

func decodeCancel(w http.ResponseWriter, r *http.Request) (cancelRequest, error) {
	payoutID, obj, err := operation.ReadAbout(w, r, IDPrefix, "payout")
	if err != nil {
		return cancelRequest{}, err
	}
	return cancelRequest{PayoutID: payoutID}, jsonbody.NewValidator(obj).Err()
}

// cancel queues, under the payout's lock, the job that cancels a pending
// payout at the provider (the API never calls it), and answers 202 with the
// payout: read it until canceled, or in transit if the bank was quicker. A
// payout not pending is refused and nothing is stored: one still being made
// may become cancelable.
func (s service) cancel(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt, req cancelRequest) (idempotency.Outcome, error) {
	p, err := rowsOf(s.Keys).Locked(ctx, tx, attempt.Request.TenantID, req.PayoutID)
	switch {
	case errors.Is(err, ErrNotFound):
		return idempotency.Outcome{}, problem.New(problem.NotFound, "No payout %q.", req.PayoutID)
	case err != nil:
		return idempotency.Outcome{}, err
	case p.Status != StatusPending:
		return idempotency.Outcome{}, &problem.Error{Type: problem.PayoutNotCancelable,
			Detail:     fmt.Sprintf("Payout %s is %s; only a pending payout can be canceled.", p.ID, p.Status),
			Extensions: map[string]any{"payout_id": p.ID, "payout_status": p.Status}}
	}
	if _, err := s.Outbox.InsertTx(ctx, tx, operation.Args[cancelling]{TenantID: p.TenantID, ID: p.ID}); err != nil {
		return idempotency.Outcome{}, err
	}
	resp, err := s.Accepted(p, location(p))
	return idempotency.Outcome{Status: idempotency.StatusCompleted, ResourceID: p.ID, Response: resp}, err
}
