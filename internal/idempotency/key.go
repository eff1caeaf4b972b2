package idempotency

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/platform/problem"
)

// HeaderName is the request header that carries the client's key.
const HeaderName = "Idempotency-Key"

// Key length limits. The lower bound keeps guessable keys such as "1" out;
// 255 fits a UUID, a ULID or a base64url-encoded 128-bit or larger value with
// a prefix, and is what providers accept.
const (
	MinKeyLength = 16
	MaxKeyLength = 255
)

// KeyAlphabet lists the characters a key may contain, for documentation.
const KeyAlphabet = "A-Z a-z 0-9 - _ . : ="

// ParseKey extracts the key from a request's headers. It accepts the IETF
// draft's form, an RFC 8941 structured-field String ("..."), and the bare
// token form that Stripe's clients send; both name the same key. A missing,
// repeated or malformed header is a *problem.Error.
func ParseKey(h http.Header) (string, error) {
	values := h.Values(HeaderName)
	switch len(values) {
	case 0:
		return "", problem.New(problem.MissingIdempotencyKey, "Send an Idempotency-Key header with a unique value per operation, e.g. a UUID.")
	case 1:
	default:
		return "", problem.New(problem.InvalidIdempotencyKey, "The Idempotency-Key header was sent %d times; send it once.", len(values))
	}
	raw := strings.Trim(values[0], " \t")
	key := raw
	if strings.HasPrefix(raw, `"`) {
		s, err := parseStructuredString(raw)
		if err != nil {
			return "", problem.New(problem.InvalidIdempotencyKey, "%s", err.Error())
		}
		key = s
	}
	if err := validateKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// validateKey checks the characters first, so that the length it reports
// (in characters, all ASCII by then) is the one the client sees.
func validateKey(key string) error {
	pos := 0
	for i, r := range key {
		pos++
		if r < utf8.RuneSelf && isKeyChar(byte(r)) {
			continue
		}
		// The detail echoes the character as the client sent it: a whole
		// UTF-8 character, quoted with Go escapes for anything unprintable,
		// or the byte itself if the header is not UTF-8 (HTTP allows any
		// octet in a field value), so the detail is always valid UTF-8.
		what := strconv.QuoteRune(r)
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(key[i:]); size == 1 {
				what = fmt.Sprintf("the byte 0x%02X (not UTF-8)", key[i])
			}
		}
		return problem.New(problem.InvalidIdempotencyKey, "The key contains %s at character %d; allowed characters are %s.", what, pos, KeyAlphabet)
	}
	if len(key) < MinKeyLength || len(key) > MaxKeyLength {
		return problem.New(problem.InvalidIdempotencyKey, "The key is %d characters long; it must be %d to %d.", len(key), MinKeyLength, MaxKeyLength)
	}
	return nil
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == ':' || c == '='
}

type syntaxError string

func (e syntaxError) Error() string { return string(e) }

// parseStructuredString parses an RFC 8941 §3.3.3 String that must make up
// the whole field value. Parameters are not part of the key's syntax, so
// anything after the closing quote is rejected rather than ignored: two
// clients must never disagree about which key a header names.
func parseStructuredString(s string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", syntaxError("A backslash in a quoted key may only escape \" or \\.")
			}
			b.WriteByte(s[i])
		case c == '"':
			if i != len(s)-1 {
				return "", syntaxError("Unexpected characters after the closing quote of the key.")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", syntaxError("A quoted key may contain only printable ASCII.")
		default:
			b.WriteByte(c)
		}
	}
	return "", syntaxError("The quoted key has no closing quote.")
}
