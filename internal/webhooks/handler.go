package webhooks

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/platform/respond"
	"github.com/oncepay/oncepay/internal/provider"
)

// MaxBodyBytes bounds an event's body. Stripe's events are a few kilobytes;
// a larger body is not one of them.
const MaxBodyBytes = 512 << 10

// Handler serves POST /v1/webhooks/stripe. It is authenticated by the
// signature alone, never by a tenant's API key: events concern the provider
// account, not one tenant.
type Handler struct {
	Pool   *pgxpool.Pool
	Jobs   Inserter
	Logger *slog.Logger
	// Secret is the endpoint's signing secret (whsec_…). Empty disables the
	// endpoint: it answers 503, so the provider keeps the events and
	// retries them (for days, at Stripe) until a secret is configured.
	Secret string
	// Tolerance is how old a signature's timestamp may be, against replays
	// of a captured delivery. Defaults to stripe-go's 5 minutes.
	Tolerance time.Duration
	// Timeout bounds the database work of one delivery. Defaults to 5s.
	Timeout time.Duration
	// Kinds are the operation kinds whose own events are stored with a job.
	Kinds operation.Kinds
}

// badField is a 400 naming what was wrong: the signature header or the body.
func badField(field, detail string) *problem.Error {
	return &problem.Error{Type: problem.InvalidRequest, Detail: "The event was not accepted; nothing was stored.",
		Fields: []problem.FieldError{{Field: field, Detail: detail}}}
}

// receipt is the body of a 200: whether this delivery stored the event.
type receipt struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// verify checks an event's signature against the secret (too old or
// dated in the future beyond the tolerance is refused alike) and reads
// it. Its error is the 400 to answer; why exactly goes to the log, not to
// whoever is probing the endpoint.
func (h *Handler) verify(ctx context.Context, payload []byte, signature string, now time.Time) (provider.Event, error) {
	tolerance := cmp.Or(h.Tolerance, webhook.DefaultTolerance)
	err := webhook.ValidatePayloadWithTolerance(payload, signature, h.Secret, tolerance)
	if err == nil && signedAt(signature).After(now.Add(tolerance)) {
		// The library refuses only a signature too old; one dated too far
		// ahead would stay replayable for that long, so it is refused alike.
		err = errors.New("the signature's timestamp lies in the future beyond the tolerance")
	}
	if err != nil {
		h.Logger.WarnContext(ctx, "webhook refused: signature not verified", slog.String("request_id", middleware.GetReqID(ctx)),
			slog.Any("error", err))
		return provider.Event{}, badField("Stripe-Signature", "is missing, malformed, wrong, too old or dated in the future")
	}
	// Only what is kept is decoded: the payload is stored as it came.
	ev, err := provider.ParseEvent(payload)
	if err != nil {
		return provider.Event{}, badField("body", "is not a JSON event")
	}
	if ev.ID == "" || ev.Type == "" {
		return provider.Event{}, badField("body", "is an event without an id or a type")
	}
	// The API version is not enforced: an event only says which object to
	// read again, and that object is read through our own pinned client, so
	// an event rendered in another version cannot mislead us. Rejecting it
	// would lose every event until the endpoint's version matched stripe-go's.
	if ev.APIVersion != stripe.APIVersion {
		h.Logger.WarnContext(ctx, "event rendered in another API version; accepted, as its object is read again",
			slog.String("event_id", ev.ID), slog.String("api_version", ev.APIVersion),
			slog.String("client_api_version", stripe.APIVersion))
	}
	return ev, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.Secret == "" {
		respond.Problem(w, r, h.Logger, &problem.Error{Type: problem.ServiceUnavailable, RetryAfter: time.Minute,
			Detail: "Webhooks are not configured on this server (STRIPE_WEBHOOK_SECRET is unset)."})
		return
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		respond.Problem(w, r, h.Logger, problem.New(problem.RequestTooLarge, "An event body is at most %d bytes.", MaxBodyBytes))
		return
	}
	if err != nil {
		respond.Problem(w, r, h.Logger, badField("body", "could not be read"))
		return
	}
	ev, err := h.verify(r.Context(), payload, r.Header.Get("Stripe-Signature"), time.Now())
	if err != nil {
		respond.Problem(w, r, h.Logger, err)
		return
	}
	log := h.Logger.With(slog.String("event_id", ev.ID), slog.String("event_type", ev.Type))
	ctx, cancel := context.WithTimeout(r.Context(), cmp.Or(h.Timeout, 5*time.Second))
	defer cancel()
	stored, err := Ingest(ctx, h.Pool, h.Jobs, ev, SourceWebhook, h.Kinds)
	if err != nil {
		// 503 or 500: the provider retries the delivery.
		respond.Problem(w, r, h.Logger, err)
		return
	}
	if stored {
		log.InfoContext(ctx, "event stored")
	} else {
		log.DebugContext(ctx, "event already stored; delivery acknowledged")
	}
	respond.JSON(w, http.StatusOK, receipt{ID: ev.ID, Duplicate: !stored})
}

// signedAt is the timestamp (t=) of a Stripe-Signature header, zero when it
// has none; the caller has verified the signature, which covers it.
func signedAt(header string) time.Time {
	for _, part := range strings.Split(header, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.Unix(secs, 0)
			}
		}
	}
	return time.Time{}
}
