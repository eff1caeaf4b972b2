package provider

import (
	"context"
	"errors"
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
	if w.CreatedFrom.IsZero() || w.CreatedTo.IsZero() || w.CreatedTo.Before(w.CreatedFrom) {
		return errors.New("provider: listing intents needs a creation window")
	}
	maxPages := w.MaxPages
	if maxPages <= 0 {
		maxPages = 500
	}
	params := &stripe.PaymentIntentListParams{
		// created is whole seconds: widen to whole seconds on both sides.
		CreatedRange: &stripe.RangeQueryParams{
			GreaterThanOrEqual: w.CreatedFrom.Unix(),
			LesserThanOrEqual:  w.CreatedTo.Unix() + 1,
		},
	}
	params.Limit = stripe.Int64(100)
	params.Context = ctx
	it := c.api.PaymentIntents.List(params)
	page := make([]*Intent, 0, 100)
	pages := 0
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		pages++
		err := fn(page)
		page = make([]*Intent, 0, 100)
		return err
	}
	for it.Next() {
		if pages >= maxPages {
			return ErrScanTooLarge
		}
		page = append(page, intentOf(it.PaymentIntent()))
		if len(page) == 100 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list payment intents: %w", err)
	}
	return flush()
}

// ListRefundsCreated calls fn with the refunds created in w, of every
// intent, a page (at most 100) at a time, newest first, through the
// consistent list endpoint: what the ledger check compares with our
// refunds. It only reads. Errors and w.MaxPages work as for ListIntents.
func (c *Client) ListRefundsCreated(ctx context.Context, w ListWindow, fn func([]*Refund) error) error {
	if w.CreatedFrom.IsZero() || w.CreatedTo.IsZero() || w.CreatedTo.Before(w.CreatedFrom) {
		return errors.New("provider: listing refunds needs a creation window")
	}
	maxPages := w.MaxPages
	if maxPages <= 0 {
		maxPages = 500
	}
	params := &stripe.RefundListParams{
		CreatedRange: &stripe.RangeQueryParams{
			GreaterThanOrEqual: w.CreatedFrom.Unix(),
			LesserThanOrEqual:  w.CreatedTo.Unix() + 1,
		},
	}
	params.Limit = stripe.Int64(100)
	params.Context = ctx
	it := c.api.Refunds.List(params)
	page := make([]*Refund, 0, 100)
	pages := 0
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		pages++
		err := fn(page)
		page = make([]*Refund, 0, 100)
		return err
	}
	for it.Next() {
		if pages >= maxPages {
			return ErrScanTooLarge
		}
		page = append(page, RefundOf(it.Refund()))
		if len(page) == 100 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list refunds: %w", err)
	}
	return flush()
}
