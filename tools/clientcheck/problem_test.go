package clientcheck_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

func TestProblemSlugsAreTheAPIs(t *testing.T) {
	t.Parallel()
	for _, slug := range []string{
		client.ProblemMissingIdempotencyKey, client.ProblemInvalidIdempotencyKey, client.ProblemIdempotencyKeyMismatch,
		client.ProblemIdempotencyKeyInUse, client.ProblemIdempotencyOutcomeUnknown, client.ProblemIdempotencyKeyExpired,
		client.ProblemIdempotencyRetryNeeded, client.ProblemInvalidRequest, client.ProblemRequestTooLarge,
		client.ProblemUnsupportedMediaType, client.ProblemUnsupportedContentEncoding, client.ProblemUnauthorized,
		client.ProblemNotFound, client.ProblemMethodNotAllowed, client.ProblemCardDeclined, client.ProblemProviderRejected,
		client.ProblemServiceUnavailable, client.ProblemInternal,
	} {
		_, ok := problem.Lookup(slug)
		require.True(t, ok, "the API has no problem type %q", slug)
	}
}

// respond is a fault that answers with a fixed response.
func respond(status int, contentType, body string) fault {
	return func(req *http.Request, _ func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {contentType}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	}
}

func TestProblemDocuments(t *testing.T) {
	t.Parallel()
	b := setup(t, client.WithMaxAttempts(1))

	t.Run("ExtensionMembersAreKept", func(t *testing.T) {
		b.net.inject(respond(http.StatusUnprocessableEntity, "application/problem+json; charset=utf-8",
			`{"type":"/docs/problems/idempotency-key-expired","title":"Expired","status":422,"detail":"d","instance":"/i",`+
				`"resource_id":"pay_1","refund_id":"re_1","retry":{"n":1}}`))
		_, _, err := b.client.CreatePayment(b.ctx, visa(2000))
		pe := requireProblem(t, err, http.StatusUnprocessableEntity, client.ProblemIdempotencyKeyExpired)
		require.Equal(t, "pay_1", pe.ResourceID)
		require.Equal(t, "/i", pe.Instance)
		require.Equal(t, map[string]json.RawMessage{"refund_id": json.RawMessage(`"re_1"`), "retry": json.RawMessage(`{"n":1}`)}, pe.Extensions)
		require.Equal(t, "oncepay: 422 Expired: d", pe.Error())
	})
	t.Run("AProxysErrorPageIsAProblemToo", func(t *testing.T) {
		b.net.inject(respond(http.StatusBadGateway, "text/html", "<html>upstream went away</html>"))
		_, _, err := b.client.CreatePayment(b.ctx, visa(2000))
		pe := requireProblem(t, err, http.StatusBadGateway, "")
		require.Equal(t, "about:blank", pe.Type)
		require.Equal(t, "Bad Gateway", pe.Title)
		require.Equal(t, "<html>upstream went away</html>", pe.Detail)
		require.ErrorContains(t, err, "gave up after 1 attempt:")
	})
}

func TestConflictsAreRetriedOnlyForTheKeysState(t *testing.T) {
	t.Parallel()
	api := setup(t)
	conflict := func(slug string) fault {
		return respond(http.StatusConflict, "application/problem+json",
			`{"type":"/docs/problems/`+slug+`","title":"Conflict","status":409}`)
	}

	t.Run("OutcomeUnknownIsRetried", func(t *testing.T) {
		t.Parallel()
		b := api.fork(t)
		f := conflict(client.ProblemIdempotencyOutcomeUnknown)
		b.net.inject(func(req *http.Request, forward func(*http.Request) (*http.Response, error)) (*http.Response, error) {
			resp, err := f(req, forward)
			resp.Header.Set("Retry-After", "60")
			return resp, err
		})
		p, res, err := b.client.CreatePayment(b.ctx, visa(2000))
		require.NoError(t, err)
		require.Equal(t, 2, res.Attempts)
		require.Equal(t, []time.Duration{time.Minute}, b.waits.recorded())
		require.Equal(t, []string{p.ID}, b.paymentsWithKey(res.IdempotencyKey))
	})
	t.Run("AnotherConflictIsNot", func(t *testing.T) {
		t.Parallel()
		b := api.fork(t)
		b.net.inject(conflict("something-else"))
		_, res, err := b.client.CreatePayment(b.ctx, visa(2000))
		requireProblem(t, err, http.StatusConflict, "something-else")
		require.Equal(t, 1, res.Attempts)
	})
}
