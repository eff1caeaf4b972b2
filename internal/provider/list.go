package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// ListWindow asks for every intent created in a window, whoever created it:
// what the ledger check compares with our own rows.
type ListWindow struct {
	// CreatedFrom and CreatedTo bound the intents' creation. Required.
	CreatedFrom, CreatedTo time.Time
	// MaxPages bounds the listing (100 intents a page). Defaults to 500.
	MaxPages int
}

// ListIntents calls fn with the intents created in w, a page (at most
// 100) at a time, newest first, through the consistent list endpoint (never
// search, which lags). It only reads. An error from fn stops the listing
// and is returned; a window with more than w.MaxPages pages is
// ErrScanTooLarge after fn has seen those pages.
func (c *Client) ListIntents(ctx context.Context, w ListWindow, fn func([]*Intent) error) error {
	created, maxPages, err := w.bounds("intents")
	if err != nil {
		return err
	}
	params := &stripe.PaymentIntentListParams{CreatedRange: created}
	params.Limit = stripe.Int64(listPageSize)
	params.Context = ctx
	c.scope(params)
	it := c.api.PaymentIntents.List(params)
	return inPages("payment intents", it.Next, func() *Intent { return intentOf(it.PaymentIntent()) }, it.Err, maxPages, fn)
}

// ListRefundsCreated calls fn with the refunds created in w, of every
// intent, a page (at most 100) at a time, newest first, through the
// consistent list endpoint: what the ledger check compares with our
// refunds. It only reads. Errors and w.MaxPages work as for ListIntents.
func (c *Client) ListRefundsCreated(ctx context.Context, w ListWindow, fn func([]*Refund) error) error {
	created, maxPages, err := w.bounds("refunds")
	if err != nil {
		return err
	}
	params := &stripe.RefundListParams{CreatedRange: created}
	params.Limit = stripe.Int64(listPageSize)
	params.Context = ctx
	c.scope(params)
	it := c.api.Refunds.List(params)
	return inPages("refunds", it.Next, func() *Refund { return RefundOf(it.Refund()) }, it.Err, maxPages, fn)
}

// listPageSize is the most the list endpoints return at once.
const listPageSize = 100

// bounds checks the window and returns it as a creation range (created is
// whole seconds: widened to whole seconds on both sides) and its page cap.
func (w ListWindow) bounds(what string) (*stripe.RangeQueryParams, int, error) {
	if w.CreatedFrom.IsZero() || w.CreatedTo.IsZero() || w.CreatedTo.Before(w.CreatedFrom) {
		return nil, 0, fmt.Errorf("provider: listing %s needs a creation window", what)
	}
	maxPages := w.MaxPages
	if maxPages <= 0 {
		maxPages = 500
	}
	return &stripe.RangeQueryParams{
		GreaterThanOrEqual: w.CreatedFrom.Unix(),
		LesserThanOrEqual:  w.CreatedTo.Unix() + 1,
	}, maxPages, nil
}

// inPages hands what a stripe-go iterator yields (next, current) to fn in
// pages of listPageSize, at most maxPages of them: beyond, ErrScanTooLarge.
// An error from fn stops it and is returned as it is; the iterator's own
// error (iterErr) is returned before the last page is handed over.
func inPages[T any](what string, next func() bool, current func() T, iterErr func() error, maxPages int, fn func([]T) error) error {
	page := make([]T, 0, listPageSize)
	pages := 0
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		pages++
		err := fn(page)
		page = make([]T, 0, listPageSize)
		return err
	}
	for next() {
		if pages >= maxPages {
			return ErrScanTooLarge
		}
		page = append(page, current())
		if len(page) == listPageSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iterErr(); err != nil {
		return fmt.Errorf("list %s: %w", what, Redact(err))
	}
	return flush()
}
