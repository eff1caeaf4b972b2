package stripesim_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// searchIDs runs a search through stripe-go's iterator, which follows
// next_page, and returns the ids in the order received.
func searchIDs(t *testing.T, b *bundle, query string, limit int64) ([]string, error) {
	t.Helper()
	params := &stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: query}}
	if limit > 0 {
		params.Limit = stripe.Int64(limit)
	}
	it := b.api.PaymentIntents.Search(params)
	var ids []string
	for it.Next() {
		ids = append(ids, it.PaymentIntent().ID)
	}
	return ids, it.Err()
}

// immediateSearch makes intents searchable as soon as they are created, for
// tests of what search finds rather than of when.
var immediateSearch = stripesim.Config{SearchIndexDelay: -1}

func TestSearch(t *testing.T) {
	t.Parallel()

	// create makes an intent with payment_id and order metadata.
	create := func(t *testing.T, b *bundle, pm, paymentID, order string) string {
		t.Helper()
		p := intentParams(pm, true)
		p.AddMetadata("payment_id", paymentID)
		p.AddMetadata("order", order)
		pi, err := b.api.PaymentIntents.New(p)
		if err != nil {
			return stripeError(t, err).PaymentIntent.ID
		}
		return pi.ID
	}

	t.Run("ByMetadata", func(t *testing.T) {
		t.Parallel()
		b := setup(t, immediateSearch)
		want := create(t, b, "pm_card_visa", "pay_1", "o1")
		create(t, b, "pm_card_visa", "pay_2", "o1")

		ids, err := searchIDs(t, b, "metadata['payment_id']:'pay_1'", 0)
		require.NoError(t, err)
		require.Equal(t, []string{want}, ids)

		ids, err = searchIDs(t, b, `metadata["payment_id"]:"pay_1"`, 0)
		require.NoError(t, err)
		require.Equal(t, []string{want}, ids, "double quotes work as well")
	})

	t.Run("AndNarrows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, immediateSearch)
		succeeded := create(t, b, "pm_card_visa", "pay_1", "o1")
		create(t, b, "pm_card_chargeDeclined", "pay_2", "o1")

		ids, err := searchIDs(t, b, "metadata['order']:'o1' AND status:'succeeded'", 0)
		require.NoError(t, err)
		require.Equal(t, []string{succeeded}, ids)
	})

	t.Run("OrWidens", func(t *testing.T) {
		t.Parallel()
		b := setup(t, immediateSearch)
		first := create(t, b, "pm_card_visa", "pay_1", "o1")
		second := create(t, b, "pm_card_visa", "pay_2", "o2")
		create(t, b, "pm_card_visa", "pay_3", "o3")

		ids, err := searchIDs(t, b, "metadata['payment_id']:'pay_1' OR metadata['payment_id']:'pay_2'", 0)
		require.NoError(t, err)
		require.Equal(t, []string{second, first}, ids)
	})

	t.Run("PagesNewestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, immediateSearch)
		a := create(t, b, "pm_card_visa", "pay_a", "o1")
		c := create(t, b, "pm_card_visa", "pay_b", "o1")
		d := create(t, b, "pm_card_visa", "pay_c", "o1")

		ids, err := searchIDs(t, b, "metadata['order']:'o1'", 1)
		require.NoError(t, err)
		require.Equal(t, []string{d, c, a}, ids)
	})

	t.Run("NoMatchIsEmpty", func(t *testing.T) {
		t.Parallel()
		b := setup(t, immediateSearch)
		create(t, b, "pm_card_visa", "pay_1", "o1")

		ids, err := searchIDs(t, b, "metadata['payment_id']:'pay_none'", 0)
		require.NoError(t, err)
		require.Empty(t, ids)
	})

	t.Run("InvalidQueryIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, immediateSearch)

		for _, q := range []string{"metadata[payment_id]:'x'", "created>100", "status:'a' AND currency:'usd' OR amount:1"} {
			_, err := searchIDs(t, b, q, 0)
			serr := stripeError(t, err)
			require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode, q)
			require.Equal(t, "query", serr.Param, q)
		}
	})

	t.Run("WireShape", func(t *testing.T) {
		t.Parallel()
		b := setup(t, immediateSearch)
		id := create(t, b, "pm_card_visa", "pay_1", "o1")

		q := url.Values{"query": {"metadata['payment_id']:'pay_1'"}, "expand[]": {"total_count"}}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.srv.URL+"/v1/payment_intents/search?"+q.Encode(), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testAPIKey)
		res, body := send(t, b, req)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		var got struct {
			Object     string           `json:"object"`
			Data       []map[string]any `json:"data"`
			HasMore    bool             `json:"has_more"`
			NextPage   *string          `json:"next_page"`
			URL        string           `json:"url"`
			TotalCount int              `json:"total_count"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		require.Equal(t, "search_result", got.Object)
		require.Len(t, got.Data, 1)
		require.Equal(t, id, got.Data[0]["id"])
		require.False(t, got.HasMore)
		require.Nil(t, got.NextPage)
		require.Equal(t, "/v1/payment_intents/search", got.URL)
		require.Equal(t, 1, got.TotalCount)
	})
	t.Run("NewIntentAppearsAfterTheIndexDelay", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setup(t, stripesim.Config{Now: c.Now, SearchIndexDelay: 30 * time.Second})
		older := create(t, b, "pm_card_visa", "pay_1", "o1")
		c.Advance(10 * time.Second)
		newer := create(t, b, "pm_card_visa", "pay_2", "o1")

		ids, err := searchIDs(t, b, "metadata['order']:'o1'", 0)
		require.NoError(t, err)
		require.Empty(t, ids, "neither is indexed yet")

		c.Advance(20 * time.Second)
		ids, err = searchIDs(t, b, "metadata['order']:'o1'", 0)
		require.NoError(t, err)
		require.Equal(t, []string{older}, ids, "30s after its creation the older one is")

		list := collectList(t, b)
		require.Equal(t, []string{newer, older}, list, "the list endpoint does not lag")

		c.Advance(10 * time.Second)
		ids, err = searchIDs(t, b, "metadata['order']:'o1'", 0)
		require.NoError(t, err)
		require.Equal(t, []string{newer, older}, ids)
	})

	t.Run("DefaultDelayIsTwoSeconds", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setup(t, stripesim.Config{Now: c.Now})
		id := create(t, b, "pm_card_visa", "pay_1", "o1")

		c.Advance(2*time.Second - time.Millisecond)
		ids, err := searchIDs(t, b, "metadata['payment_id']:'pay_1'", 0)
		require.NoError(t, err)
		require.Empty(t, ids)

		c.Advance(time.Millisecond)
		ids, err = searchIDs(t, b, "metadata['payment_id']:'pay_1'", 0)
		require.NoError(t, err)
		require.Equal(t, []string{id}, ids)
	})
}

// collectList lists every payment intent, newest first.
func collectList(t *testing.T, b *bundle) []string {
	t.Helper()
	it := b.api.PaymentIntents.List(&stripe.PaymentIntentListParams{})
	var ids []string
	for it.Next() {
		ids = append(ids, it.PaymentIntent().ID)
	}
	require.NoError(t, it.Err())
	return ids
}
