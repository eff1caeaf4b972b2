package stripesim

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSearchQuery(t *testing.T) {
	t.Parallel()

	in := &intent{
		amount: 1500, currency: "usd", customer: "cus_1", status: statusSucceeded,
		metadata: map[string]string{"payment_id": "pay_1", "note": "it's here"},
	}
	for _, tc := range []struct {
		name, query string
		match       bool
	}{
		{"MetadataSingleQuotes", "metadata['payment_id']:'pay_1'", true},
		{"MetadataDoubleQuotes", `metadata["payment_id"]:"pay_1"`, true},
		{"MetadataOtherValue", "metadata['payment_id']:'pay_2'", false},
		{"MetadataMissingKey", "metadata['order']:''", false},
		{"EscapedQuote", `metadata['note']:'it\'s here'`, true},
		{"AndAllMatch", "metadata['payment_id']:'pay_1' AND status:'succeeded' AND currency:'USD'", true},
		{"AndOneFails", "metadata['payment_id']:'pay_1' AND status:'processing'", false},
		{"OrOneMatches", "status:'processing' OR customer:'cus_1'", true},
		{"OrNoneMatch", "status:'processing' OR customer:'cus_2'", false},
		{"BareAmount", "amount:1500", true},
		{"ExtraSpaces", "  metadata['payment_id']:'pay_1'   AND   amount:1500  ", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, err := parseSearchQuery(tc.query)
			require.NoError(t, err)
			require.Equal(t, tc.match, q.matches(in))
		})
	}

	for _, tc := range []struct{ name, query string }{
		{"Empty", ""},
		{"UnquotedMetadataKey", "metadata[payment_id]:'x'"},
		{"UnsupportedField", "created:'1'"},
		{"UnsupportedOperator", "amount>100"},
		{"MixedAndOr", "status:'a' AND currency:'usd' OR amount:1"},
		{"LowercaseAnd", "status:'a' and currency:'usd'"},
		{"Unterminated", "status:'succeeded"},
		{"MissingValue", "status:"},
	} {
		t.Run("Rejects"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseSearchQuery(tc.query)
			require.Error(t, err)
		})
	}
}

func TestParamSpecCheck(t *testing.T) {
	t.Parallel()

	spec := paramSpec{
		"amount":   {kind: paramScalar},
		"metadata": {kind: paramHash},
		"expand":   {kind: paramList},
		"apm":      {kind: paramStruct, fields: []string{"enabled"}},
	}
	for _, tc := range []struct {
		name, form, unknown string
	}{
		{"Accepted", "amount=1&metadata[a]=b&expand[]=x&expand[0]=y&apm[enabled]=true", ""},
		{"EmptyMetadataUnsets", "metadata=", ""},
		{"UnknownTopLevel", "amount=1&amont=2", "amont"},
		{"NestedScalar", "amount[x]=1", "amount[x]"},
		{"UnknownStructField", "apm[enabld]=true", "apm[enabld]"},
		{"DeepMetadata", "metadata[a][b]=c", "metadata[a][b]"},
		{"MetadataWithValue", "metadata=x", "metadata"},
		{"ListWithName", "expand[x]=y", "expand[x]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			params, err := url.ParseQuery(tc.form)
			require.NoError(t, err)
			e := spec.check(params)
			if tc.unknown == "" {
				require.Nil(t, e)
				return
			}
			require.NotNil(t, e)
			require.Equal(t, "parameter_unknown", e.Code)
			require.Equal(t, tc.unknown, e.Param)
		})
	}
}
