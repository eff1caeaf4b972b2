package stripesim

import (
	"cmp"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"
)

// Config tunes a Server. Zero values take the documented defaults.
type Config struct {
	// Logger receives one line per Stripe API request (method, path, status,
	// request id, idempotency key, injected fault). Defaults to discarding.
	Logger *slog.Logger
	// MaxHold bounds how long a hold_after fault keeps a response open when
	// the client does not give up first, so that a forgotten fault cannot
	// pin a connection (and a graceful shutdown) forever. Defaults to 60s.
	MaxHold time.Duration
	// ProcessingRetrievals is how many retrievals (GET
	// /v1/payment_intents/{id}) a processing intent answers with status
	// processing; the retrieval after them finds it succeeded. A negative
	// value makes the first retrieval find it succeeded. Defaults to 2.
	ProcessingRetrievals int
	// Rand decides whether a fault with a probability fires. It is only used
	// under the server's lock, so it need not be safe for concurrent use.
	// Pass a seeded source, e.g. rand.New(rand.NewPCG(1, 2)), for
	// reproducible runs. Defaults to a randomly seeded source.
	Rand *rand.Rand
	// Now is the simulator's clock: it stamps the created time of objects
	// and decides when they become searchable. Defaults to time.Now.
	Now func() time.Time
	// SearchIndexDelay is how long after its creation, by Now, a payment
	// intent first appears in search results (GET
	// /v1/payment_intents/search). Stripe's search is eventually consistent
	// and new objects can take up to about a minute to appear, so a client
	// must not read "search found nothing" as "it does not exist"; the list
	// endpoint is consistent and does not lag. A negative value makes
	// intents searchable at once, for tests that are not about the lag.
	// Only creation lags: once indexed, an intent is found by its current
	// status and metadata, where Stripe's index lags behind updates too.
	// Defaults to 2s: long enough that a search right after a create misses
	// it, short enough for a demo.
	SearchIndexDelay time.Duration
	// PayoutTransitDelay is how long after its creation, by Now (and the
	// advances of POST /_sim/clock), a payout stays pending before the
	// bank has it: it is then in_transit, and can no longer be canceled.
	// Payouts move on by themselves, whether or not anyone reads them, so
	// that their events are sent. A negative value makes the step
	// immediate: right after the request that created the payout, which
	// answers it pending. Defaults to 1s (a business day at Stripe).
	PayoutTransitDelay time.Duration
	// PayoutPaidDelay is how long a payout is in transit before it is paid,
	// or fails when its amount ends in 13 (see the package documentation).
	// A negative value makes the step immediate. Defaults to 2s.
	PayoutPaidDelay time.Duration
	// ReplayCommittedOn5xx makes an error_after fault store the committed
	// response under the request's idempotency key instead of the error it
	// answers, so that a retry with the key replays the committed object.
	// That is not what Stripe does: once an endpoint has started executing,
	// Stripe stores its result under the key for 24 hours, a 500 included,
	// and replays that 500 to every retry with the key. The option exists
	// for tests written before the simulator stored 5xx responses. Defaults
	// to false: the 5xx is stored and replayed, as at Stripe. Either way an
	// error_before fault stores nothing, since it stands for a failure
	// before any endpoint began executing, which Stripe does not store.
	ReplayCommittedOn5xx bool
	// WebhookURL is where events are sent, signed, as Stripe sends them to
	// a webhook endpoint. Empty sends none; events are still listed by GET
	// /v1/events.
	WebhookURL string
	// WebhookSecret is the endpoint's signing secret (whsec_…). Required
	// with WebhookURL.
	WebhookSecret string
	// WebhookEvents are the event types the endpoint is enabled for, as a
	// Stripe endpoint's enabled_events: a type, or a prefix ending in "*"
	// ("payment_intent.*"). Events of other types are not sent (they are
	// still listed). Empty sends every event, as enabled_events ["*"].
	WebhookEvents []string
	// WebhookClient sends the deliveries. Defaults to a client with no
	// timeout of its own (each delivery has one of 10s) that keeps up to
	// 64 idle connections to the endpoint: deliveries run concurrently,
	// and Go's default of 2 would dial most of them anew.
	WebhookClient *http.Client
	// WebhookRetryBase is the wait after a failed delivery; it doubles per
	// attempt, up to 30 times itself. Defaults to 500ms.
	WebhookRetryBase time.Duration
	// WebhookMaxAttempts is how many times one delivery is tried. Defaults
	// to 8.
	WebhookMaxAttempts int
	// WebhookMaxHold bounds how long a reorder fault holds an event when
	// no later event comes. Defaults to 5s.
	WebhookMaxHold time.Duration
	// EventAPIVersion is the api_version events carry. Defaults to the
	// version stripe-go v76 pins (2023-10-16); a test sets another to play
	// an endpoint configured with a different version.
	EventAPIVersion string
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.MaxHold = cmp.Or(c.MaxHold, 60*time.Second)
	c.ProcessingRetrievals = cmp.Or(c.ProcessingRetrievals, 2)
	c.Rand = cmp.Or(c.Rand, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	c.SearchIndexDelay = cmp.Or(c.SearchIndexDelay, 2*time.Second)
	c.PayoutTransitDelay = cmp.Or(c.PayoutTransitDelay, time.Second)
	c.PayoutPaidDelay = cmp.Or(c.PayoutPaidDelay, 2*time.Second)
	if c.WebhookClient == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.MaxIdleConnsPerHost = 64
		c.WebhookClient = &http.Client{Transport: transport}
	}
	c.WebhookRetryBase = cmp.Or(c.WebhookRetryBase, 500*time.Millisecond)
	c.WebhookMaxAttempts = cmp.Or(c.WebhookMaxAttempts, 8)
	c.WebhookMaxHold = cmp.Or(c.WebhookMaxHold, 5*time.Second)
	c.EventAPIVersion = cmp.Or(c.EventAPIVersion, apiVersion)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
