package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// Find asks which intents carry one metadata value, for a charge whose
// intent id is not known (its answer was lost or was a stored 5xx).
type Find struct {
	// MetadataKey and MetadataValue identify the intents (payment_id = …).
	MetadataKey, MetadataValue string
	// CreatedFrom and CreatedTo bound the list scan: the window in which
	// the intent can have been created. Both required for a scan.
	CreatedFrom, CreatedTo time.Time
	// Scan lists the window when search finds nothing. Only a scan can
	// prove absence; pass false before the window has settled, when a
	// missing intent proves nothing anyway.
	Scan bool
	// MaxPages bounds the scan (100 intents a page). Defaults to 50.
	MaxPages int
}

// Found is FindIntents' answer.
type Found struct {
	// Intents carry the metadata value, in the order found.
	Intents []*Intent
	// Complete is true when the whole window was listed: with no Intents,
	// that proves no intent with the value was created in the window.
	Complete bool
}

// ErrScanTooLarge is returned when the window holds more intents than
// Find.MaxPages lists.
var ErrScanTooLarge = errors.New("provider: too many intents in the window to scan")

// FindIntents looks for intents by metadata: first by search, which is
// cheap but lags, then, if search found nothing and f.Scan is set, by
// listing the creation window, which is consistent.
func (c *Client) FindIntents(ctx context.Context, f Find) (Found, error) {
	found, err := c.searchIntents(ctx, f.MetadataKey, f.MetadataValue)
	if err != nil || len(found) > 0 || !f.Scan {
		return Found{Intents: found}, err
	}
	return c.scanIntents(ctx, f)
}

func (c *Client) searchIntents(ctx context.Context, key, value string) ([]*Intent, error) {
	params := &stripe.PaymentIntentSearchParams{}
	params.Query = fmt.Sprintf("metadata[%s]:%s", searchString(key), searchString(value))
	params.Limit = stripe.Int64(10)
	params.Single = true
	params.Context = ctx
	c.scope(params)
	it := c.api.PaymentIntents.Search(params)
	var found []*Intent
	for it.Next() {
		if in := intentOf(it.PaymentIntent()); in.Metadata[key] == value {
			found = append(found, in)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("search payment intents: %w", Redact(err))
	}
	return found, nil
}

// searchString quotes s for Stripe's search query language.
func searchString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func (c *Client) scanIntents(ctx context.Context, f Find) (Found, error) {
	if f.CreatedFrom.IsZero() || f.CreatedTo.IsZero() {
		return Found{}, errors.New("provider: a scan needs its creation window")
	}
	maxPages := f.MaxPages
	if maxPages <= 0 {
		maxPages = 50
	}
	params := &stripe.PaymentIntentListParams{
		// created is whole seconds: widen to whole seconds on both sides.
		CreatedRange: &stripe.RangeQueryParams{
			GreaterThanOrEqual: f.CreatedFrom.Unix(),
			LesserThanOrEqual:  f.CreatedTo.Unix() + 1,
		},
	}
	params.Limit = stripe.Int64(100)
	params.Context = ctx
	c.scope(params)
	it := c.api.PaymentIntents.List(params)
	var found []*Intent
	for n := 0; it.Next(); n++ {
		if n >= maxPages*100 {
			return Found{Intents: found}, ErrScanTooLarge
		}
		if in := intentOf(it.PaymentIntent()); in.Metadata[f.MetadataKey] == f.MetadataValue {
			found = append(found, in)
		}
	}
	if err := it.Err(); err != nil {
		return Found{Intents: found}, fmt.Errorf("list payment intents: %w", Redact(err))
	}
	return Found{Intents: found, Complete: true}, nil
}
