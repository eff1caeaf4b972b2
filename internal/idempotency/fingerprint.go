package idempotency

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// Fingerprint identifies a request's meaning: SHA-256 over the method, the
// path and the JSON encoding of the validated request value.
//
// Pass the typed, validated value, never the raw body: encoding/json writes
// struct fields in declaration order, map keys sorted and numbers in one
// spelling, so key order, whitespace and "2000" versus "2e3" in the client's
// body do not change the fingerprint, while any change of value does. The
// length-prefixed framing keeps method, path and body from running into
// each other.
func Fingerprint(method, path string, validated any) ([32]byte, error) {
	body, err := json.Marshal(validated)
	if err != nil {
		return [32]byte{}, fmt.Errorf("encode request for fingerprint: %w", err)
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(method), []byte(path), body} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
