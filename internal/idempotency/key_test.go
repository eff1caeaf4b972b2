package idempotency_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

func header(values ...string) http.Header {
	h := http.Header{}
	for _, v := range values {
		h.Add(idempotency.HeaderName, v)
	}
	return h
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	const uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	valid := []struct {
		name, header, want string
	}{
		{"BareUUID", uuid, uuid},
		{"StructuredStringUUID", `"` + uuid + `"`, uuid},
		{"SurroundingSpaces", "  " + uuid + "\t", uuid},
		{"ULID", "01HZX3J4K5M6N7P8Q9R0S1T2V3", "01HZX3J4K5M6N7P8Q9R0S1T2V3"},
		{"Base64URLPadded", "q83vEjRWeJASNFZ4kKvN7w==", "q83vEjRWeJASNFZ4kKvN7w=="},
		{"Exactly16", strings.Repeat("a", 16), strings.Repeat("a", 16)},
		{"Exactly255", strings.Repeat("b", 255), strings.Repeat("b", 255)},
		{"PrefixedWithColon", "order:2024:" + uuid, "order:2024:" + uuid},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := idempotency.ParseKey(header(tc.header))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	invalid := []struct {
		name     string
		headers  []string
		wantType problem.Type
	}{
		{"Missing", nil, problem.MissingIdempotencyKey},
		{"Repeated", []string{uuid, uuid}, problem.InvalidIdempotencyKey},
		{"Empty", []string{""}, problem.InvalidIdempotencyKey},
		{"TooShort", []string{"abc"}, problem.InvalidIdempotencyKey},
		{"TooLong", []string{strings.Repeat("c", 256)}, problem.InvalidIdempotencyKey},
		{"Space", []string{"abcdefgh ijklmnop"}, problem.InvalidIdempotencyKey},
		{"Slash", []string{"abcdefgh/ijklmnop"}, problem.InvalidIdempotencyKey},
		{"NonASCII", []string{"abcdefghijklmnopé"}, problem.InvalidIdempotencyKey},
		{"UnterminatedQuote", []string{`"` + uuid}, problem.InvalidIdempotencyKey},
		{"ParametersAfterString", []string{`"` + uuid + `";a=1`}, problem.InvalidIdempotencyKey},
		{"EscapedQuoteInside", []string{`"abcdefgh\"ijklmnop"`}, problem.InvalidIdempotencyKey},
		{"BadEscape", []string{`"abcdefgh\nijklmnop"`}, problem.InvalidIdempotencyKey},
		{"QuotedTooShort", []string{`"abc"`}, problem.InvalidIdempotencyKey},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := idempotency.ParseKey(header(tc.headers...))
			var pe *problem.Error
			require.True(t, errors.As(err, &pe), "want a problem, got %v", err)
			require.Equal(t, tc.wantType, pe.Type)
			require.Equal(t, http.StatusBadRequest, pe.Type.Status)
			require.NotEmpty(t, pe.Detail)
		})
	}
}

// TestInvalidKeyDetailEchoesTheCharacter: the detail names the offending
// character as sent, as valid UTF-8, never byte by byte ("Ã" for "é").
func TestInvalidKeyDetailEchoesTheCharacter(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]string{
		"clé-0000000000000000":      `'é' at character 3`,
		"abcdefghijklmnop😀":         `'😀' at character 17`,
		"abcdefgh ijklmnop":         `' ' at character 9`,
		"abcdefgh\x7fijklmnop":      `'\x7f' at character 9`,
		"abc\xffdefghijklmnopqrstu": "the byte 0xFF (not UTF-8) at character 4",
		"ab\u2028cdefghijklmnopqr":  `'\u2028' at character 3`,
	} {
		_, err := idempotency.ParseKey(header(value))
		var pe *problem.Error
		require.True(t, errors.As(err, &pe), value)
		require.True(t, utf8.ValidString(pe.Detail), pe.Detail)
		require.Contains(t, pe.Detail, want, value)
	}
}

// FuzzParseKey checks the parser's contract on any input: it never panics,
// and a key it accepts is within the published format and names the same
// key whether sent bare or quoted.
func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		"8e03978e-40d5-43e8-bc93-6894a57f9324", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `"abc\"def"`, `"\\`, `""`,
		"", " ", `"` + strings.Repeat("x", 300) + `"`, "01HZX3J4K5M6N7P8Q9R0S1T2V3", "q83vEjRWeJASNFZ4kKvN7w==", "\x00\xff",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		key, err := idempotency.ParseKey(header(value))
		if err != nil {
			var pe *problem.Error
			if !errors.As(err, &pe) || pe.Type.Status != http.StatusBadRequest {
				t.Fatalf("error is not a 400 problem: %v", err)
			}
			if !utf8.ValidString(pe.Detail) {
				t.Fatalf("detail is not UTF-8: %q", pe.Detail)
			}
			return
		}
		if len(key) < idempotency.MinKeyLength || len(key) > idempotency.MaxKeyLength {
			t.Fatalf("accepted key of length %d", len(key))
		}
		for _, c := range []byte(key) {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:=", rune(c)) {
				t.Fatalf("accepted key with %q", c)
			}
		}
		again, err := idempotency.ParseKey(header(`"` + key + `"`))
		if err != nil || again != key {
			t.Fatalf("quoted form of %q parsed as %q, %v", key, again, err)
		}
	})
}

func TestPreferredWait(t *testing.T) {
	t.Parallel()
	cases := map[string]time.Duration{
		"":                          0,
		"wait=5":                    5 * time.Second,
		"WAIT=5":                    5 * time.Second,
		"respond-async, wait=10":    10 * time.Second,
		"wait=10; foo=bar":          10 * time.Second,
		`wait="7"`:                  7 * time.Second,
		"wait=31":                   idempotency.MaxWait,
		"wait=99999999999999999999": 0,
		"wait=-1":                   0,
		"wait=0":                    0,
		"wait=abc":                  0,
		"wait":                      0,
		"return=minimal":            0,
		" wait = 3 ":                3 * time.Second,
	}
	for value, want := range cases {
		h := http.Header{}
		if value != "" {
			h.Set("Prefer", value)
		}
		require.Equal(t, want, idempotency.PreferredWait(h), "Prefer: %q", value)
	}
}

func FuzzPreferredWait(f *testing.F) {
	for _, seed := range []string{"wait=5", "respond-async, wait=10", `wait="7"`, "wait=1;x", ",,,", "wait=999999999"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		h := http.Header{}
		h.Set("Prefer", value)
		if d := idempotency.PreferredWait(h); d < 0 || d > idempotency.MaxWait {
			t.Fatalf("wait %v out of range for %q", d, value)
		}
	})
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	type body struct {
		Amount   int64             `json:"amount"`
		Metadata map[string]string `json:"metadata"`
	}
	a, err := idempotency.Fingerprint("POST", "/v1/payments", body{Amount: 2000, Metadata: map[string]string{"a": "1", "b": "2"}})
	require.NoError(t, err)
	b, err := idempotency.Fingerprint("POST", "/v1/payments", body{Amount: 2000, Metadata: map[string]string{"b": "2", "a": "1"}})
	require.NoError(t, err)
	require.Equal(t, a, b, "map order must not matter")

	for name, other := range map[string]func() ([32]byte, error){
		"OtherAmount": func() ([32]byte, error) { return idempotency.Fingerprint("POST", "/v1/payments", body{Amount: 2001}) },
		"OtherPath":   func() ([32]byte, error) { return idempotency.Fingerprint("POST", "/v1/refunds", body{Amount: 2000}) },
		"OtherMethod": func() ([32]byte, error) { return idempotency.Fingerprint("PUT", "/v1/payments", body{Amount: 2000}) },
		// Framing: moving bytes between method and path must not collide.
		"ShiftedBoundary": func() ([32]byte, error) { return idempotency.Fingerprint("POST/v1", "/payments", body{Amount: 2000}) },
	} {
		got, err := other()
		require.NoError(t, err)
		require.NotEqual(t, a, got, name)
	}
}
