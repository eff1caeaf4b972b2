package authorizations

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/provider"
)

// record records a final provider answer for the action sent, under its
// locks (its payment's first): the action's state; the payment's, from the
// intent the answer carries (captured: succeeded; released: canceled); and
// the key's final answer, 200 with the payment, or the kind's problem when
// the provider refused. An action another run recorded, or of another
// generation now, is left alone.
func record(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, sent Action, out provider.Outcome) error {
	rs := rowsOf(keys, sent.Kind)
	rs.Final = func(ctx context.Context, tx pgx.Tx, final Action) (idempotency.Response, error) {
		p, err := payments.GetPayment(ctx, tx, final.TenantID, final.PaymentID)
		if err != nil {
			return idempotency.Response{}, err
		}
		if out.Intent != nil && out.Intent.ID == final.ProviderPaymentIntentID {
			if ended, changed, err := payments.EndAuthorization(ctx, tx, p, out.Intent); err != nil {
				return idempotency.Response{}, err
			} else if changed {
				p = ended
			}
		}
		return finalResponse(final, p)
	}
	_, _, err := rs.Record(ctx, tx, sent, func(Action) (operation.Verdict, error) {
		switch out.Kind {
		case provider.Succeeded:
			return operation.Verdict{Status: string(StatusSucceeded)}, nil
		case provider.Rejected, provider.Declined:
			return operation.Verdict{Status: string(StatusFailed), FailureCode: cmp.Or(out.Code, "rejected"), FailureMessage: out.Message}, nil
		}
		return operation.Verdict{}, rs.Table.NotFinal(sent.ID, out.Kind)
	})
	return err
}

// finalResponse is what the action's key replays once it is final: the
// payment (200), or the problem of an authorization the provider no
// longer held.
func finalResponse(a Action, p payments.Payment) (idempotency.Response, error) {
	location := "/v1/payments/" + p.ID
	var resp idempotency.Response
	if a.Status == StatusSucceeded {
		var err error
		if resp, err = operation.Done(p, location); err != nil {
			return resp, err
		}
	} else {
		pe := refusal(a.Kind, p)
		pe.Detail = fmt.Sprintf("The payment provider refused to %s payment %s's authorization (%s); the payment is %s.",
			a.Kind, p.ID, operation.Deref(a.FailureCode), p.Status)
		resp = operation.Refused(pe, location)
	}
	resp.Header[OperationIDHeader] = a.ID
	return resp, nil
}

// refusal is the kind's problem for a payment it cannot act on.
func refusal(kind Kind, p payments.Payment) *problem.Error {
	t := problem.PaymentNotCapturable
	if kind == Cancel {
		t = problem.PaymentNotCancelable
	}
	return &problem.Error{Type: t, Extensions: map[string]any{"payment_id": p.ID, "payment_status": p.Status}}
}
