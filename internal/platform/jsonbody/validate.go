package jsonbody

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/platform/problem"
)

// Validator pulls typed fields out of an Object and collects an error for
// every field that is wrong, then reports them together.
type Validator struct {
	obj  Object
	seen map[string]bool
	errs []problem.FieldError
}

// NewValidator starts validating obj.
func NewValidator(obj Object) *Validator {
	return &Validator{obj: obj, seen: map[string]bool{}}
}

// Fail records an error for field.
func (v *Validator) Fail(field, format string, args ...any) {
	v.errs = append(v.errs, problem.FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

// raw returns a field's JSON, treating an explicit null as absent.
func (v *Validator) raw(name string, required bool) (json.RawMessage, bool) {
	v.seen[name] = true
	raw, ok := v.obj.Members[name]
	if ok && string(raw) == "null" {
		ok = false
	}
	if !ok && required {
		v.Fail(name, "is required")
	}
	return raw, ok
}

// StringRule constrains a string field.
type StringRule struct {
	Required bool
	MinLen   int
	MaxLen   int
	// Check, if set, returns a description of what is wrong, or "".
	Check func(string) string
}

// String reads a string field.
func (v *Validator) String(name string, rule StringRule) string {
	raw, ok := v.raw(name, rule.Required)
	if !ok {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		v.Fail(name, "must be a string")
		return ""
	}
	n := utf8.RuneCountInString(s)
	switch esc := loneSurrogate(raw); {
	case esc != "":
		v.Fail(name, "contains %s, %s", esc, loneSurrogateAdvice)
	case strings.ContainsRune(s, 0):
		v.Fail(name, "must not contain NUL characters")
	case rule.Required && n == 0:
		v.Fail(name, "must not be empty")
	case n < rule.MinLen:
		v.Fail(name, "must be at least %d characters", rule.MinLen)
	case rule.MaxLen > 0 && n > rule.MaxLen:
		v.Fail(name, "must be at most %d characters (got %d)", rule.MaxLen, n)
	case rule.Check != nil:
		if msg := rule.Check(s); msg != "" {
			v.Fail(name, "%s", msg)
		}
	}
	return s
}

// OneOf is a StringRule's Check that allows only the values given (or an
// empty string, which Required refuses if the field must be set).
func OneOf(allowed ...string) func(string) string {
	return func(s string) string {
		if s != "" && !slices.Contains(allowed, s) {
			return "must be one of " + strings.Join(allowed, ", ")
		}
		return ""
	}
}

// Integer reads an integer field within [lo, hi]. Any JSON spelling of an
// integral value is accepted (2000, 2000.0, 2e3); a fraction is not.
func (v *Validator) Integer(name string, required bool, lo, hi int64) int64 {
	raw, ok := v.raw(name, required)
	if !ok {
		return 0
	}
	var num json.Number
	// json.Number also accepts a quoted number; an amount must be a number.
	if raw[0] == '"' || json.Unmarshal(raw, &num) != nil {
		v.Fail(name, "must be an integer")
		return 0
	}
	if !boundedNumber(num.String()) {
		v.Fail(name, "must be an integer from %d to %d, written in at most %d characters with an exponent from -%d to %d",
			lo, hi, MaxNumberLen, MaxExponent, MaxExponent)
		return 0
	}
	n, ok := exactInteger(num.String(), lo, hi)
	if !ok {
		v.Fail(name, "must be an integer from %d to %d", lo, hi)
		return 0
	}
	return n
}

// Bounds on a number literal, checked before it is parsed. An exact parse of
// 1e-999999 builds 10^999999 (milliseconds of CPU and megabytes for a
// 64-byte body); no integer field needs more than these to be spelled.
const (
	MaxNumberLen = 64
	MaxExponent  = 64
)

// boundedNumber reports whether s, a valid JSON number, is at most
// MaxNumberLen bytes long and has an exponent within ±MaxExponent. It looks
// at the digits only, so its cost does not depend on the value.
func boundedNumber(s string) bool {
	if len(s) > MaxNumberLen {
		return false
	}
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return true
	}
	exp := strings.TrimLeft(strings.TrimLeft(s[i+1:], "+-"), "0")
	// At most MaxNumberLen digits here, so Atoi cannot overflow past an
	// error, and an error means a magnitude beyond any bound.
	e, err := strconv.Atoi(exp)
	return exp == "" || err == nil && e <= MaxExponent
}

// exactInteger converts a JSON number to an int64 in [lo, hi] only if its
// value is exactly integral. The float parse rules out large magnitudes
// cheaply; boundedNumber, checked first, keeps tiny ones (1e-999999, which
// the float parse rounds to 0) from reaching the exact rational parse.
func exactInteger(s string, lo, hi int64) (int64, bool) {
	if !boundedNumber(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < float64(lo)-1 || f > float64(hi)+1 {
		return 0, false
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	n := r.Num().Int64()
	if n < lo || n > hi {
		return 0, false
	}
	return n, true
}

// MapRule constrains a string-to-string object field.
type MapRule struct {
	MaxEntries  int
	MaxKeyLen   int
	MaxValueLen int
	// KeyForbids lists characters no key may contain.
	KeyForbids string
}

// StringMap reads an object whose values are strings.
func (v *Validator) StringMap(name string, rule MapRule) map[string]string {
	raw, ok := v.raw(name, false)
	if !ok {
		return nil
	}
	inner, err := Parse(raw)
	if err != nil {
		v.Fail(name, "must be an object of strings: %v", err)
		return nil
	}
	if len(inner.Names) > rule.MaxEntries {
		v.Fail(name, "may have at most %d keys (got %d)", rule.MaxEntries, len(inner.Names))
		return nil
	}
	out := make(map[string]string, len(inner.Names))
	for _, k := range inner.Names {
		field := name + "." + k
		if strings.ContainsRune(k, 0) {
			v.Fail(name, "keys must not contain NUL characters")
			continue
		}
		if k == "" || utf8.RuneCountInString(k) > rule.MaxKeyLen {
			v.Fail(field, "keys must be 1 to %d characters", rule.MaxKeyLen)
			continue
		}
		if i := strings.IndexAny(k, rule.KeyForbids); rule.KeyForbids != "" && i >= 0 {
			v.Fail(name, "key %q contains %q; keys must not contain any of %s", k, k[i], quoteChars(rule.KeyForbids))
			continue
		}
		var s string
		if err := json.Unmarshal(inner.Members[k], &s); err != nil {
			v.Fail(field, "must be a string")
			continue
		}
		if esc := loneSurrogate(inner.Members[k]); esc != "" {
			v.Fail(field, "contains %s, %s", esc, loneSurrogateAdvice)
			continue
		}
		if strings.ContainsRune(s, 0) {
			v.Fail(field, "must not contain NUL characters")
			continue
		}
		if utf8.RuneCountInString(s) > rule.MaxValueLen {
			v.Fail(field, "must be at most %d characters", rule.MaxValueLen)
			continue
		}
		out[k] = s
	}
	return out
}

// quoteChars lists the characters of s as "[ ]" for a message.
func quoteChars(s string) string {
	return strings.Join(strings.Split(s, ""), " ")
}

// Err reports every collected error, and every member no rule asked for, as
// one invalid-request problem; nil if the body was valid.
func (v *Validator) Err() error {
	for _, name := range v.obj.Names {
		if !v.seen[name] {
			v.Fail(name, "is not a known field")
		}
	}
	if len(v.errs) == 0 {
		return nil
	}
	errs := slices.Clone(v.errs)
	return &problem.Error{Type: problem.InvalidRequest, Detail: fmt.Sprintf("%d invalid field(s).", len(errs)), Fields: errs}
}
