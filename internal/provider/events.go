package provider

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// Event is a provider event: a notice that an object changed. It is a
// hint, never the truth: the object it carries was rendered when the event
// was created, events arrive late, twice or out of order, so whoever acts
// on one reads the object again.
type Event struct {
	ID         string
	Type       string
	APIVersion string
	Created    time.Time
	// ObjectID is the id of the object the event is about (data.object.id).
	ObjectID string
	// Account is the connected account the event happened on; "" for the
	// platform's own.
	Account string
	// Payload is the event as JSON, for the record.
	Payload json.RawMessage
}

// ParseEvent reads a delivered event from its JSON, whose signature the
// caller has verified: only the fields an Event keeps are decoded, and
// Payload is the payload itself. An event whose data.object is not an
// object with an id has no ObjectID.
func ParseEvent(payload []byte) (Event, error) {
	var wire struct {
		ID         string `json:"id"`
		Type       string `json:"type"`
		APIVersion string `json:"api_version"`
		Created    int64  `json:"created"`
		Account    string `json:"account"`
		Data       struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(payload, &wire); err != nil {
		return Event{}, fmt.Errorf("read event: %w", err)
	}
	ev := Event{ID: wire.ID, Type: wire.Type, APIVersion: wire.APIVersion, Created: time.Unix(wire.Created, 0).UTC(),
		Account: wire.Account, Payload: payload}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(wire.Data.Object, &obj) == nil {
		ev.ObjectID = obj.ID
	}
	return ev, nil
}

// EventOf converts a stripe-go event (from a list): its JSON, read as a
// delivered one is.
func EventOf(e *stripe.Event) (Event, error) {
	payload, err := json.Marshal(e)
	if err != nil {
		return Event{}, fmt.Errorf("encode event %s: %w", e.ID, err)
	}
	return ParseEvent(payload)
}

// ErrUnknownCursor is returned by ListEvents when the provider no longer
// knows the cursor event (Stripe keeps events for 30 days).
var ErrUnknownCursor = errors.New("provider: the cursor event is unknown")

// ListEvents lists, oldest first, the events created after the event
// after (by the list's order, which is consistent: an event is listed from
// its creation), or, with no cursor, those created since since. It stops
// after maxPages pages of 100; complete says whether it listed everything.
func (c *Client) ListEvents(ctx context.Context, after string, since time.Time, maxPages int) (events []Event, complete bool, err error) {
	params := &stripe.EventListParams{}
	params.Limit = stripe.Int64(100)
	params.Context = ctx
	c.scope(params)
	if after != "" {
		// ending_before pages towards newer events, and stripe-go returns
		// each page oldest first: the order the events happened in.
		params.EndingBefore = stripe.String(after)
	} else {
		params.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}
	}
	it := c.api.Events.List(params)
	truncated := false
	for n := 0; it.Next(); n++ {
		if n >= maxPages*100 {
			truncated = true
			break
		}
		ev, err := EventOf(it.Event())
		if err != nil {
			return events, false, err
		}
		// Listed on the client's account, it happened there.
		ev.Account = cmp.Or(ev.Account, c.account)
		events = append(events, ev)
	}
	if err := it.Err(); err != nil {
		var se *stripe.Error
		if after != "" && errors.As(err, &se) && se.HTTPStatusCode == http.StatusBadRequest && se.Code == stripe.ErrorCodeResourceMissing {
			return nil, false, fmt.Errorf("list events after %s: %w", after, ErrUnknownCursor)
		}
		return events, false, fmt.Errorf("list events: %w", Redact(err))
	}
	if after == "" {
		// Without a cursor the list is newest first.
		slices.Reverse(events)
	}
	return events, !truncated, nil
}
