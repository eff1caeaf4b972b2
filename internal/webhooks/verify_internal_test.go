package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

// FuzzVerify: whatever body and signature arrive, signed with the secret
// or not, verify never panics; it either refuses with a 400 naming the
// signature or the body, or returns an event with an id and a type.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent"}}}`), true, int64(0))
	f.Add([]byte(`{"id":"evt_1","type":"x","data":{"object":{}}}`), true, int64(400))
	f.Add([]byte(`{}`), true, int64(-400))
	f.Add([]byte(`not json`), false, int64(0))
	f.Add([]byte(`{"id":"evt_1","type":"charge.refunded","data":{"object":"x"}}`), true, int64(0))
	const secret = "whsec_fuzz"
	h := &Handler{Secret: secret, Logger: slog.New(slog.DiscardHandler)}
	now := time.Now()
	f.Fuzz(func(t *testing.T, payload []byte, sign bool, skew int64) {
		header := "t=1,v1=00"
		if sign {
			header = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret,
				Timestamp: now.Add(time.Duration(skew) * time.Second)}).Header
		}
		ev, err := h.verify(context.Background(), payload, header, now)
		if err != nil {
			var pe *problem.Error
			if !errors.As(err, &pe) || pe.Type != problem.InvalidRequest || len(pe.Fields) != 1 {
				t.Fatalf("refused with %v, not a 400 naming one field", err)
			}
			return
		}
		if ev.ID == "" || ev.Type == "" {
			t.Fatalf("accepted an event without an id or a type: %+v", ev)
		}
		if skew > 300 || skew < -300 {
			t.Fatalf("accepted a signature %d s off", skew)
		}
	})
}

// FuzzRedacted: whatever payload arrives, redacted never panics, keeps
// valid JSON valid, and leaves no client secret of an event's object.
func FuzzRedacted(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","data":{"object":{"id":"pi_1","client_secret":"pi_1_secret_x","amount":1099}}}`))
	f.Add([]byte(`{"data":{"object":{"client_secret":null}}}`))
	f.Add([]byte(`{"data":{"object":"client_secret"}}`))
	f.Add([]byte(`{"data":null,"client_secret":"x"}`))
	f.Add([]byte(`not json "client_secret"`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		out := redacted(payload)
		if !json.Valid(payload) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%s became invalid JSON: %s", payload, out)
		}
		// Nothing but client secrets changed.
		var in, got any
		if json.Unmarshal(payload, &in) != nil || json.Unmarshal(out, &got) != nil {
			t.Fatalf("%s or its redaction %s does not decode", payload, out)
		}
		if !reflect.DeepEqual(withoutSecrets(in), withoutSecrets(got)) {
			t.Fatalf("redacting %s changed more than secrets: %s", payload, out)
		}
		// Read as the record's readers read it: keys as written.
		var ev map[string]any
		if json.Unmarshal(out, &ev) != nil {
			return
		}
		data, _ := ev["data"].(map[string]any)
		obj, _ := data["object"].(map[string]any)
		if secret, ok := obj["client_secret"].(string); ok && secret != "[redacted]" {
			t.Fatalf("the client secret %q survived in %s", secret, out)
		}
	})
}

// withoutSecrets is v with every client_secret string replaced as
// redacted replaces it.
func withoutSecrets(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if _, isString := x.(string); k == "client_secret" && isString {
				v[k] = "[redacted]"
			} else {
				v[k] = withoutSecrets(x)
			}
		}
	case []any:
		for i, x := range v {
			v[i] = withoutSecrets(x)
		}
	}
	return v
}

// TestEventTypesAreTheHandledOnes: every type the endpoint should be
// enabled for is acted on, once, and the types nothing acts on are not
// among them.
func TestEventTypesAreTheHandledOnes(t *testing.T) {
	seen := map[string]bool{}
	for _, typ := range EventTypes(kinds.All()) {
		require.NotNil(t, kindOf(typ, kinds.All()), typ)
		require.False(t, seen[typ], "%s listed twice", typ)
		seen[typ] = true
	}
	for _, typ := range []string{"payment_intent.created", "charge.succeeded", "customer.created", "refund.updated.extra"} {
		require.Nil(t, kindOf(typ, kinds.All()), typ)
	}
}

// TestEnabledEventsAreDocumented: the operator's list of the types to
// enable (docs/operations.md) and the compose stack's simulator send
// exactly the types acted on.
func TestEnabledEventsAreDocumented(t *testing.T) {
	want := EventTypes(kinds.All())
	slices.Sort(want)
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	line, ok := "", false
	for l := range strings.Lines(string(doc)) {
		if line, ok = strings.CutPrefix(l, "Enabled events: "); ok {
			break
		}
	}
	require.True(t, ok, "docs/operations.md has no line of enabled events")
	var documented []string
	for _, typ := range strings.Split(strings.TrimSuffix(strings.TrimSpace(line), "."), ", ") {
		documented = append(documented, strings.Trim(typ, "`"))
	}
	slices.Sort(documented)
	require.Equal(t, want, documented)

	compose, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*STRIPESIM_WEBHOOK_EVENTS: (\S+)$`).FindSubmatch(compose)
	require.NotNil(t, m, "docker-compose.yml enables no events for the simulator")
	composed := strings.Split(string(m[1]), ",")
	slices.Sort(composed)
	require.Equal(t, want, composed)
}
