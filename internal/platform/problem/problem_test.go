package problem_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/problem"
)

func TestMarshalPutsStandardMembersFirst(t *testing.T) {
	t.Parallel()
	e := &problem.Error{Type: problem.CardDeclined, Detail: "declined", Extensions: map[string]any{
		"payment_id": "pay_1", "decline_code": "insufficient_funds", "status": 200,
	}}
	got := string(e.Marshal())
	require.Equal(t, `{"type":"/docs/problems/card-declined","title":"The card was declined","status":402,"detail":"declined",`+
		`"decline_code":"insufficient_funds","payment_id":"pay_1"}`, got)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &m))
}

// A problem is JSON, not HTML: "<", ">" and "&" are written as they are.
func TestMarshalDoesNotEscapeHTML(t *testing.T) {
	t.Parallel()
	e := &problem.Error{Type: problem.Unauthorized, Detail: "Send Authorization: Bearer <api key>.",
		Fields:     []problem.FieldError{{Field: "a&b", Detail: "<x>"}},
		Extensions: map[string]any{"<ext>": "Tom & Jerry"}}
	got := string(e.Marshal())
	for _, want := range []string{`Bearer <api key>.`, `"a&b"`, `"<x>"`, `"<ext>":"Tom & Jerry"`} {
		require.Contains(t, got, want)
	}
	require.NotContains(t, got, `\u003c`)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &m))
}

func TestCatalogSlugsAreUniqueAndDocumented(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, pt := range problem.Catalog() {
		require.False(t, seen[pt.Slug], pt.Slug)
		seen[pt.Slug] = true
		require.NotEmpty(t, pt.Doc, pt.Slug)
		got, ok := problem.Lookup(pt.Slug)
		require.True(t, ok)
		require.Equal(t, pt, got)
	}
}
