package jsonbody_test

import (
	"encoding/json"
	"errors"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

func TestParse(t *testing.T) {
	t.Parallel()
	obj, err := jsonbody.Parse([]byte(` { "b": 1, "a": {"x": [1, 2]}, "c": null } `))
	require.NoError(t, err)
	require.Equal(t, []string{"b", "a", "c"}, obj.Names)
	require.JSONEq(t, `{"x":[1,2]}`, string(obj.Members["a"]))

	for name, input := range map[string]string{
		"Empty":         ``,
		"Array":         `[1]`,
		"String":        `"x"`,
		"Null":          `null`,
		"Trailing":      `{"a":1} {"b":2}`,
		"TrailingComma": `{"a":1,}`,
		"Duplicate":     `{"a":1,"a":1}`,
		"Unterminated":  `{"a":1`,
		"InvalidUTF8":   "{\"a\":\"\xff\"}",
	} {
		_, err := jsonbody.Parse([]byte(input))
		require.Error(t, err, name)
	}
}

func TestRead(t *testing.T) {
	t.Parallel()
	read := func(contentType, body string) (jsonbody.Object, error) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		return jsonbody.Read(httptest.NewRecorder(), r)
	}
	problemType := func(err error) problem.Type {
		var pe *problem.Error
		require.True(t, errors.As(err, &pe), "%v", err)
		return pe.Type
	}

	_, err := read("application/json; charset=utf-8", `{"a":1}`)
	require.NoError(t, err)
	_, err = read("", `{"a":1}`)
	require.NoError(t, err, "a missing content type is read as JSON")

	_, err = read("text/plain", `{"a":1}`)
	require.Equal(t, problem.UnsupportedMediaType, problemType(err))

	for coding, ok := range map[string]bool{"gzip": false, "identity": true, "Identity": true, "identity, br": false, "x-gzip": false, "": true} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"a":1}`))
		r.Header.Set("Content-Encoding", coding)
		w := httptest.NewRecorder()
		_, err := jsonbody.Read(w, r)
		if ok {
			require.NoError(t, err, coding)
			continue
		}
		require.Equal(t, problem.UnsupportedContentEncoding, problemType(err), coding)
		require.Equal(t, http.StatusUnsupportedMediaType, problem.UnsupportedContentEncoding.Status)
		require.Equal(t, "identity", w.Header().Get("Accept-Encoding"))
	}
	require.Equal(t, problem.UnsupportedMediaType, problemType(err))
	_, err = read("application/json", `{"a":"`+strings.Repeat("x", jsonbody.MaxBytes)+`"}`)
	require.Equal(t, problem.RequestTooLarge, problemType(err))
	_, err = read("application/json", `{"a":`)
	require.Equal(t, problem.InvalidRequest, problemType(err))
}

// TestReadOptional: a body left out is the empty object, however its
// emptiness is told (Content-Length: 0, or a chunked body of no chunks);
// a body of unknown length is read whole.
func TestReadOptional(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		body    string
		chunked bool
		members int
	}{
		{"no body", "", false, 0},
		{"an empty chunked body", "", true, 0},
		{"a chunked object", `{"a":1,"b":2}`, true, 2},
		{"an object", `{"a":1}`, false, 1},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body))
		if c.chunked {
			r.ContentLength = -1
		}
		obj, err := jsonbody.ReadOptional(httptest.NewRecorder(), r)
		require.NoError(t, err, c.name)
		require.Len(t, obj.Members, c.members, c.name)
	}
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(" "))
	r.ContentLength = -1
	_, err := jsonbody.ReadOptional(httptest.NewRecorder(), r)
	require.Error(t, err, "a body of blanks is not left out")
}

func TestValidator(t *testing.T) {
	t.Parallel()
	obj, err := jsonbody.Parse([]byte(`{"n": 2e3, "f": 1.5, "s": 7, "m": {"k": "v", "bad": 1}, "extra": true, "nul": null}`))
	require.NoError(t, err)
	v := jsonbody.NewValidator(obj)
	require.Equal(t, int64(2000), v.Integer("n", true, 1, 5000))
	v.Integer("f", true, 1, 5000)
	v.String("s", jsonbody.StringRule{})
	v.String("missing", jsonbody.StringRule{Required: true})
	v.String("nul", jsonbody.StringRule{})
	m := v.StringMap("m", jsonbody.MapRule{MaxEntries: 5, MaxKeyLen: 10, MaxValueLen: 10})
	require.Equal(t, map[string]string{"k": "v"}, m)

	var pe *problem.Error
	require.True(t, errors.As(v.Err(), &pe))
	fields := map[string]string{}
	for _, f := range pe.Fields {
		fields[f.Field] = f.Detail
	}
	require.Equal(t, map[string]string{
		"f":       "must be an integer from 1 to 5000",
		"s":       "must be a string",
		"missing": "is required",
		"m.bad":   "must be a string",
		"extra":   "is not a known field",
	}, fields)
}

// OneOf allows its values, and an absent or empty field, and names the
// values in its error.
func TestOneOf(t *testing.T) {
	t.Parallel()
	obj, err := jsonbody.Parse([]byte(`{"good": "fraudulent", "empty": "", "bad": "because"}`))
	require.NoError(t, err)
	v := jsonbody.NewValidator(obj)
	check := jsonbody.StringRule{Check: jsonbody.OneOf("duplicate", "fraudulent")}
	require.Equal(t, "fraudulent", v.String("good", check))
	require.Equal(t, "", v.String("empty", check))
	require.Equal(t, "", v.String("absent", check))
	v.String("bad", check)
	var pe *problem.Error
	require.True(t, errors.As(v.Err(), &pe))
	require.Equal(t, []problem.FieldError{{Field: "bad", Detail: "must be one of duplicate, fraudulent"}}, pe.Fields)
}

// PostgreSQL's text and jsonb cannot hold NUL: it must be a 400 here, not a
// database error later.
func TestValidatorRejectsNUL(t *testing.T) {
	t.Parallel()
	obj, err := jsonbody.Parse([]byte(`{"s": "a\u0000b", "m": {"k\u0000": "v", "k": "v\u0000"}}`))
	require.NoError(t, err)
	v := jsonbody.NewValidator(obj)
	v.String("s", jsonbody.StringRule{})
	v.StringMap("m", jsonbody.MapRule{MaxEntries: 5, MaxKeyLen: 10, MaxValueLen: 10})
	var pe *problem.Error
	require.True(t, errors.As(v.Err(), &pe))
	require.Len(t, pe.Fields, 3)
}

func TestIntegerSpellings(t *testing.T) {
	t.Parallel()
	for input, want := range map[string]int64{
		"2000": 2000, "2000.0": 2000, "2e3": 2000, "2E+3": 2000, "20000e-1": 2000, "0.2e4": 2000,
	} {
		obj, err := jsonbody.Parse([]byte(`{"n":` + input + `}`))
		require.NoError(t, err)
		v := jsonbody.NewValidator(obj)
		require.Equal(t, want, v.Integer("n", true, 1, 99999999), input)
		require.NoError(t, v.Err(), input)
	}
	for _, input := range []string{"2000.5", "1e400", "-1", "0", "100000000", "1e-400", `"2000"`, "true", "99999999.0000000001"} {
		obj, err := jsonbody.Parse([]byte(`{"n":` + input + `}`))
		require.NoError(t, err)
		v := jsonbody.NewValidator(obj)
		v.Integer("n", true, 1, 99999999)
		require.Error(t, v.Err(), input)
	}
}

// FuzzParse checks Parse on any input: no panic, and what it accepts is a
// JSON object whose members it reports exactly once each.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":1}`, `{"a":{"b":[1,2,{"c":null}]}}`, `{"a":1,"a":2}`, `[]`, `{"a":"\u00e9"}`, `{`, "\xff", `{"amount":2e3}`, `{"\ud800":1}`, `{"a\ud83d\ude00":"\\u"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, err := jsonbody.Parse(data)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("accepted input encoding/json rejects as an object: %v", err)
		}
		if len(m) != len(obj.Names) || len(obj.Members) != len(obj.Names) {
			t.Fatalf("member count mismatch: %d names, %d members, %d decoded", len(obj.Names), len(obj.Members), len(m))
		}
	})
}

// TestIntegerBoundsLiteralBeforeParsing: an exact parse of 1e-999999 builds
// 10^999999 (megabytes, tens of milliseconds) for a 9-byte literal. The
// literal must be rejected by its length and exponent before any parse.
// Not parallel: it reads the process's allocation counters, which other
// running tests would add to.
func TestIntegerBoundsLiteralBeforeParsing(t *testing.T) {
	for _, literal := range []string{"1e-999999", "1e999999", "0." + strings.Repeat("0", 100) + "1e101", "1E+0000000000000000000000000000000000000000000000000000000000999999"} {
		obj, err := jsonbody.Parse([]byte(`{"amount":` + literal + `}`))
		require.NoError(t, err)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v := jsonbody.NewValidator(obj)
		v.Integer("amount", true, 1, 99999999)
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10), "%s: rejected without parsing the value", literal)

		var pe *problem.Error
		require.True(t, errors.As(v.Err(), &pe), literal)
		require.Equal(t, problem.InvalidRequest, pe.Type)
		require.Len(t, pe.Fields, 1)
		require.Equal(t, "amount", pe.Fields[0].Field)
		require.Contains(t, pe.Fields[0].Detail, "exponent", literal)
	}
}

func BenchmarkIntegerHugeExponent(b *testing.B) {
	obj, err := jsonbody.Parse([]byte(`{"amount": 1e-999999}`))
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		v := jsonbody.NewValidator(obj)
		v.Integer("amount", true, 1, 99999999)
		if v.Err() == nil {
			b.Fatal("accepted")
		}
	}
}

// FuzzInteger checks Integer on any number literal: no panic, and a value it
// accepts is in range and equal to the literal's exact value.
func FuzzInteger(f *testing.F) {
	for _, seed := range []string{"2000", "2e3", "2000.0", "20000e-1", "1e-999999", "1e999999", "0.00000000000000000000001e23", "-0", "99999999.0000000001"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, literal string) {
		obj, err := jsonbody.Parse([]byte(`{"n":` + literal + `}`))
		if err != nil {
			return
		}
		v := jsonbody.NewValidator(obj)
		n := v.Integer("n", true, 1, 99999999)
		if v.Err() != nil {
			return
		}
		if n < 1 || n > 99999999 {
			t.Fatalf("%s accepted as %d, out of range", literal, n)
		}
		r, ok := new(big.Rat).SetString(strings.TrimSpace(literal))
		if !ok || r.Cmp(new(big.Rat).SetInt64(n)) != 0 {
			t.Fatalf("%s accepted as %d", literal, n)
		}
		if len(strings.TrimSpace(literal)) > jsonbody.MaxNumberLen {
			t.Fatalf("%s accepted: longer than %d", literal, jsonbody.MaxNumberLen)
		}
	})
}

// encoding/json decodes an unpaired surrogate escape as U+FFFD, so "\ud800",
// "\udfff" and "\ufffd" would validate (and fingerprint) as one string. An
// unpaired one is rejected, naming the field; a complete pair and U+FFFD
// itself are accepted.
func TestValidatorRejectsUnpairedSurrogates(t *testing.T) {
	t.Parallel()
	obj, err := jsonbody.Parse([]byte(`{"high": "a\ud800b", "low": "\udfff", "highHigh": "\ud800\ud800", "end": "x\udbff",
		"replacement": "\ufffd", "pair": "\ud83d\ude00", "escapedBackslash": "\\ud800",
		"m": {"k": "\udc00", "ok": "\uD83D\uDE00"}}`))
	require.NoError(t, err)
	v := jsonbody.NewValidator(obj)
	for _, name := range []string{"high", "low", "highHigh", "end", "replacement", "pair", "escapedBackslash"} {
		v.String(name, jsonbody.StringRule{})
	}
	m := v.StringMap("m", jsonbody.MapRule{MaxEntries: 5, MaxKeyLen: 10, MaxValueLen: 10})
	require.Equal(t, map[string]string{"ok": "😀"}, m)

	var pe *problem.Error
	require.True(t, errors.As(v.Err(), &pe))
	fields := map[string]string{}
	for _, f := range pe.Fields {
		fields[f.Field] = f.Detail
	}
	require.ElementsMatch(t, []string{"high", "low", "highHigh", "end", "m.k"}, slices.Collect(maps.Keys(fields)))
	require.Contains(t, fields["high"], `\ud800`)
	require.Contains(t, fields["low"], "unpaired UTF-16 surrogate")

	for _, input := range []string{`{"\ud800": 1}`, `{"a": 1, "b\udfff": 2}`} {
		_, err := jsonbody.Parse([]byte(input))
		require.ErrorContains(t, err, "unpaired UTF-16 surrogate", input)
	}
	_, err = jsonbody.Parse([]byte(`{"\ud83d\ude00": "\ud800"}`))
	require.NoError(t, err, "Parse judges names; values are the validator's")
}
