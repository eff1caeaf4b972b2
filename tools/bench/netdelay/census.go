package netdelay

import (
	"bytes"
	"encoding/binary"
	"strings"
)

// firstMessage names the round trip that bytes from a client start, by
// the first PostgreSQL frontend message in them (a type byte, a length of
// four bytes, its own included, then the body): "startup" for a
// connection's first; "query: " and the start of its SQL for a simple
// query (pgx sends BEGIN, COMMIT and its pings, "-- ping", that way);
// "prepare: " and the start of its SQL for a statement parsed (a
// statement's first use on a connection, or one pgx does not cache);
// "execute: " and the start of the SQL statement names for a prepared
// statement bound and run ("execute" when its SQL was not seen);
// otherwise the type. Bytes that are not such a message are "unreadable".
func firstMessage(b []byte, first bool, statement func(name string) string) string {
	if first {
		return "startup"
	}
	if len(b) < 5 {
		return "unreadable"
	}
	kind, size := b[0], binary.BigEndian.Uint32(b[1:5])
	if size < 4 {
		return "unreadable"
	}
	body := b[5:min(len(b), 5+int(size-4))]
	switch kind {
	case 'Q':
		return "query: " + sqlStart(body)
	case 'P':
		// The statement's name, then its SQL.
		if _, sql, ok := bytes.Cut(body, []byte{0}); ok {
			return "prepare: " + sqlStart(sql)
		}
		return "prepare"
	case 'B':
		// The portal's name, then the statement's.
		_, rest, _ := bytes.Cut(body, []byte{0})
		name, _, ok := bytes.Cut(rest, []byte{0})
		if sql := statement(string(name)); ok && sql != "" {
			return "execute: " + sql
		}
		return "execute"
	}
	if kind < 'A' || kind > 'z' {
		return "unreadable"
	}
	return "message " + string(kind)
}

// sqlStart is the first words of a statement, whitespace collapsed, cut at
// 48 bytes and at its terminating zero.
func sqlStart(b []byte) string {
	b, _, _ = bytes.Cut(b, []byte{0})
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 48 {
		s = s[:48]
	}
	return strings.ToValidUTF8(s, "?")
}

// parsed calls each for every statement a client's bytes parse: its name
// and the start of its SQL. A message cut at the end of b is left out.
func parsed(b []byte, each func(name, sql string)) {
	for len(b) >= 5 {
		kind, size := b[0], binary.BigEndian.Uint32(b[1:5])
		if size < 4 || uint64(size)+1 > uint64(len(b)) {
			return
		}
		body := b[5 : 1+size]
		if name, sql, ok := bytes.Cut(body, []byte{0}); kind == 'P' && ok && len(name) > 0 {
			each(string(name), sqlStart(sql))
		}
		b = b[1+size:]
	}
}
