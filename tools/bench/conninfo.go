package bench

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// conninfo is a libpq connection string of keyword = value pairs, in their
// order: a standby's primary_conninfo, which the standby phase points at a
// forwarder and must otherwise keep as its manager wrote it (the user, the
// application name the primary's synchronous_standby_names waits for, the
// SSL mode, the options).
type conninfo []conninfoParam

type conninfoParam struct{ key, value string }

// parseConninfo reads a keyword = value connection string as libpq does:
// pairs separated by whitespace, spaces allowed around '=', a value either
// single-quoted or running to the next whitespace, a backslash escaping
// the next character in both. A URI (postgres://) is refused: the manager
// writes the keyword form.
func parseConninfo(s string) (conninfo, error) {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		return nil, errors.New("a connection URI, not keyword = value pairs")
	}
	var c conninfo
	for i := 0; ; {
		i = skipSpace(s, i)
		if i == len(s) {
			return c, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		if key == "" {
			return nil, fmt.Errorf("a value without a keyword at offset %d", start)
		}
		if i = skipSpace(s, i); i == len(s) || s[i] != '=' {
			return nil, fmt.Errorf("keyword %q without '='", key)
		}
		i = skipSpace(s, i+1)
		var value strings.Builder
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		for {
			if i == len(s) {
				if quoted {
					return nil, fmt.Errorf("the value of %q has no closing quote", key)
				}
				break
			}
			if quoted && s[i] == '\'' {
				i++
				break
			}
			if !quoted && isSpace(s[i]) {
				break
			}
			// A backslash at the very end escapes nothing: libpq drops it.
			if s[i] == '\\' {
				if i++; i == len(s) {
					continue
				}
			}
			value.WriteByte(s[i])
			i++
		}
		c = append(c, conninfoParam{key, value.String()})
	}
}

// isSpace is C's isspace in the C locale, libpq's separator.
func isSpace(b byte) bool { return b == ' ' || (b >= '\t' && b <= '\r') }

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// String writes the pairs back, each value quoted, so that any value
// (empty, with spaces or quotes) reads back the same.
func (c conninfo) String() string {
	parts := make([]string, len(c))
	for i, p := range c {
		parts[i] = p.key + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p.value) + "'"
	}
	return strings.Join(parts, " ")
}

// get is the value of key, the last one given (libpq's rule), and
// whether it is given.
func (c conninfo) get(key string) (string, bool) {
	for i := len(c) - 1; i >= 0; i-- {
		if c[i].key == key {
			return c[i].value, true
		}
	}
	return "", false
}

// set gives key value: in place of its first occurrence, the later ones
// dropped; at the end if it had none.
func (c conninfo) set(key, value string) conninfo {
	out, found := make(conninfo, 0, len(c)+1), false
	for _, p := range c {
		if p.key != key {
			out = append(out, p)
		} else if !found {
			out, found = append(out, conninfoParam{key, value}), true
		}
	}
	if !found {
		out = append(out, conninfoParam{key, value})
	}
	return out
}

// conninfoThrough is the connection string s, every other parameter kept,
// with the server's address replaced by addr (host:port, an IP address):
// host and port, and hostaddr, which libpq would connect to instead of
// host, if s gives one.
func conninfoThrough(s, addr string) (string, error) {
	c, err := parseConninfo(s)
	if err != nil {
		return "", err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if net.ParseIP(host) == nil {
		return "", fmt.Errorf("%s: want an IP address", addr)
	}
	c = c.set("host", host).set("port", port)
	if _, ok := c.get("hostaddr"); ok {
		c = c.set("hostaddr", host)
	}
	return c.String(), nil
}
