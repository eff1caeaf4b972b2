package stripesim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

func TestListPaymentIntents(t *testing.T) {
	t.Parallel()

	// createEvery creates n intents, one a second, and returns their ids and
	// created times, oldest first.
	createEvery := func(t *testing.T, b *bundle, c *clock, n int) ([]string, []int64) {
		t.Helper()
		var ids []string
		var created []int64
		for i := range n {
			p := intentParams("pm_card_visa", true)
			p.AddMetadata("n", fmt.Sprint(i))
			pi, err := b.api.PaymentIntents.New(p)
			require.NoError(t, err)
			ids = append(ids, pi.ID)
			created = append(created, pi.Created)
			c.Advance(time.Second)
		}
		return ids, created
	}
	collect := func(t *testing.T, it interface {
		Next() bool
		PaymentIntent() *stripe.PaymentIntent
		Err() error
	}) []string {
		t.Helper()
		var ids []string
		for it.Next() {
			ids = append(ids, it.PaymentIntent().ID)
		}
		require.NoError(t, it.Err())
		return ids
	}
	reversed := func(ids []string) []string {
		out := slices.Clone(ids)
		slices.Reverse(out)
		return out
	}

	t.Run("CreatedRangeAcrossPagesNewestFirst", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setup(t, stripesim.Config{Now: c.Now})
		ids, created := createEvery(t, b, c, 7)
		pages := &countingTransport{}
		api := newAPI(b.srv.URL, testAPIKey, &http.Client{Transport: pages})

		params := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{
			GreaterThanOrEqual: created[1], LesserThanOrEqual: created[5],
		}}
		params.Limit = stripe.Int64(2)
		got := collect(t, api.PaymentIntents.List(params))
		require.Equal(t, reversed(ids[1:6]), got)
		require.Equal(t, int64(3), pages.n.Load(), "2 + 2 + 1 intents")
	})

	t.Run("StrictBoundsAndExactTime", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setup(t, stripesim.Config{Now: c.Now})
		ids, created := createEvery(t, b, c, 5)

		got := collect(t, b.api.PaymentIntents.List(&stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{
			GreaterThan: created[1], LesserThan: created[4],
		}}))
		require.Equal(t, []string{ids[3], ids[2]}, got)

		got = collect(t, b.api.PaymentIntents.List(&stripe.PaymentIntentListParams{Created: stripe.Int64(created[2])}))
		require.Equal(t, []string{ids[2]}, got)
	})

	t.Run("EndingBeforePagesTowardsNewer", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setup(t, stripesim.Config{Now: c.Now})
		ids, _ := createEvery(t, b, c, 6)

		params := &stripe.PaymentIntentListParams{}
		params.EndingBefore = stripe.String(ids[0])
		params.Limit = stripe.Int64(2)
		// stripe-go turns each page around when paging backwards, so the
		// iterator walks away from the cursor: oldest first.
		require.Equal(t, ids[1:], collect(t, b.api.PaymentIntents.List(params)))
	})

	t.Run("SameSecondKeepsCreationOrder", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setup(t, stripesim.Config{Now: c.Now})
		var ids []string
		for range 4 {
			pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
			require.NoError(t, err)
			ids = append(ids, pi.ID)
		}

		params := &stripe.PaymentIntentListParams{}
		params.Limit = stripe.Int64(1)
		require.Equal(t, reversed(ids), collect(t, b.api.PaymentIntents.List(params)))
	})

	t.Run("CursorIsStableWhenNewIntentsArrive", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setup(t, stripesim.Config{Now: c.Now})
		ids, _ := createEvery(t, b, c, 4)

		first := &stripe.PaymentIntentListParams{}
		first.Limit = stripe.Int64(2)
		first.Single = true
		page := collect(t, b.api.PaymentIntents.List(first))
		require.Equal(t, []string{ids[3], ids[2]}, page)

		createEvery(t, b, c, 2)
		next := &stripe.PaymentIntentListParams{}
		next.Limit = stripe.Int64(2)
		next.StartingAfter = stripe.String(page[1])
		require.Equal(t, []string{ids[1], ids[0]}, collect(t, b.api.PaymentIntents.List(next)))
	})

	t.Run("WireShapeAndDefaultLimit", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setup(t, stripesim.Config{Now: c.Now})
		ids, _ := createEvery(t, b, c, 12)

		res, body := get(t, b, "/v1/payment_intents?expand[]=data.latest_charge")
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		var got struct {
			Object  string `json:"object"`
			Data    []map[string]any
			HasMore bool   `json:"has_more"`
			URL     string `json:"url"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.Equal(t, "list", got.Object)
		require.Equal(t, "/v1/payment_intents", got.URL)
		require.True(t, got.HasMore)
		require.Len(t, got.Data, 10)
		require.Equal(t, ids[11], got.Data[0]["id"])
		require.Equal(t, "charge", got.Data[0]["latest_charge"].(map[string]any)["object"])

		res, body = get(t, b, "/v1/payment_intents?customer=cus_none")
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		require.JSONEq(t, `{"object":"list","data":[],"has_more":false,"url":"/v1/payment_intents"}`, body)
	})

	t.Run("InvalidParametersAre400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)

		for _, tc := range []struct {
			query, param string
			code         stripe.ErrorCode
		}{
			{"limit=0", "limit", ""},
			{"limit=101", "limit", ""},
			{"created[eq]=1", "created[eq]", stripe.ErrorCodeParameterUnknown},
			{"created[gte]=yesterday", "created[gte]", stripe.ErrorCodeParameterInvalidInteger},
			{"starting_after=pi_missing", "starting_after", stripe.ErrorCodeResourceMissing},
			{"starting_after=" + pi.ID + "&ending_before=" + pi.ID, "ending_before", "parameters_exclusive"},
		} {
			res, body := get(t, b, "/v1/payment_intents?"+tc.query)
			require.Equal(t, http.StatusBadRequest, res.StatusCode, tc.query)
			var e struct {
				Error struct{ Type, Code, Param string }
			}
			require.NoError(t, json.Unmarshal([]byte(body), &e))
			require.Equal(t, "invalid_request_error", e.Error.Type, tc.query)
			require.Equal(t, tc.param, e.Error.Param, tc.query)
			require.Equal(t, string(tc.code), e.Error.Code, tc.query)
		}
	})
}
