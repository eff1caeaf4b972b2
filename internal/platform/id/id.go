// Package id makes prefixed, time-ordered identifiers ("pay_01J9...").
//
// The body is a ULID-shaped value: 48 bits of Unix milliseconds then 80
// random bits, in Crockford base32. Ordering by id is ordering by creation
// time to the millisecond, which is what cursor pagination needs, and the
// random part makes ids unguessable across tenants.
package id

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// New returns prefix + "_" + a 26-character time-ordered random id.
func New(prefix string) string {
	return prefix + "_" + encode(time.Now())
}

func encode(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails (Go 1.24+)
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	// 128 bits as 26 base32 digits: the first digit holds the top 3 bits.
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Valid reports whether s looks like an id New(prefix) made, so lookups
// with malformed ids are answered without touching the database.
func Valid(prefix, s string) bool {
	if len(s) != len(prefix)+27 || s[:len(prefix)] != prefix || s[len(prefix)] != '_' {
		return false
	}
	for i := len(prefix) + 1; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' && c != 'I' && c != 'L' && c != 'O' && c != 'U') {
			return false
		}
	}
	return true
}
