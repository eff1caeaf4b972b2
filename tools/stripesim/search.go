package stripesim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// searchClause is one field:value term of a search query.
type searchClause struct {
	field string // metadata, status, currency, customer or amount
	key   string // the metadata key
	value string
}

// searchQuery is a parsed subset of Stripe's search query language: clauses
// of the form field:'value' or metadata['key']:'value', joined by AND or by
// OR (Stripe does not allow mixing the two).
type searchQuery struct {
	clauses []searchClause
	or      bool
}

func (q searchQuery) matches(in *intent) bool {
	for _, c := range q.clauses {
		if c.matches(in) == q.or {
			return q.or
		}
	}
	return !q.or
}

func (c searchClause) matches(in *intent) bool {
	switch c.field {
	case "metadata":
		v, ok := in.metadata[c.key]
		return ok && v == c.value
	case "status":
		return in.status == c.value
	case "currency":
		return strings.EqualFold(in.currency, c.value)
	case "customer":
		return in.customer == c.value
	case "amount":
		n, err := strconv.ParseInt(c.value, 10, 64)
		return err == nil && in.amount == n
	}
	return false
}

// parseSearchQuery parses a query such as
// metadata['payment_id']:'pay_1' AND status:'succeeded'.
func parseSearchQuery(s string) (searchQuery, error) {
	p := &queryParser{s: s}
	var q searchQuery
	joiner := ""
	for {
		p.skipSpace()
		c, err := p.clause()
		if err != nil {
			return searchQuery{}, err
		}
		q.clauses = append(q.clauses, c)
		p.skipSpace()
		if p.eof() {
			break
		}
		word := p.word()
		if word != "AND" && word != "OR" {
			return searchQuery{}, fmt.Errorf("expected AND or OR at %d, found %q", p.pos, word)
		}
		if joiner != "" && word != joiner {
			return searchQuery{}, errors.New("AND and OR cannot be mixed in one query")
		}
		joiner = word
	}
	q.or = joiner == "OR"
	return q, nil
}

// queryParser scans a search query left to right.
type queryParser struct {
	s   string
	pos int
}

func (p *queryParser) eof() bool { return p.pos >= len(p.s) }

func (p *queryParser) skipSpace() {
	for !p.eof() && p.s[p.pos] == ' ' {
		p.pos++
	}
}

// word reads up to the next space or one of the given stop bytes.
func (p *queryParser) word(stops ...byte) string {
	start := p.pos
	for !p.eof() && p.s[p.pos] != ' ' && !strings.ContainsRune(string(stops), rune(p.s[p.pos])) {
		p.pos++
	}
	return p.s[start:p.pos]
}

func (p *queryParser) expect(b byte) error {
	if p.eof() || p.s[p.pos] != b {
		return fmt.Errorf("expected %q at %d", b, p.pos)
	}
	p.pos++
	return nil
}

// quoted reads a string in single or double quotes; a backslash escapes
// the next character.
func (p *queryParser) quoted() (string, error) {
	if p.eof() || (p.s[p.pos] != '\'' && p.s[p.pos] != '"') {
		return "", fmt.Errorf("expected a quoted string at %d", p.pos)
	}
	quote := p.s[p.pos]
	p.pos++
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.pos]
		p.pos++
		switch {
		case c == '\\' && !p.eof():
			b.WriteByte(p.s[p.pos])
			p.pos++
		case c == quote:
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated string")
}

func (p *queryParser) clause() (searchClause, error) {
	var c searchClause
	c.field = p.word('[', ':')
	switch c.field {
	case "metadata":
		if err := p.expect('['); err != nil {
			return c, err
		}
		key, err := p.quoted()
		if err != nil {
			return c, err
		}
		if err := p.expect(']'); err != nil {
			return c, err
		}
		c.key = key
	case "status", "currency", "customer", "amount":
	case "":
		return c, fmt.Errorf("expected a field at %d", p.pos)
	default:
		return c, fmt.Errorf("the simulator cannot search on %q (it supports metadata['key'], status, currency, customer and amount)", c.field)
	}
	if err := p.expect(':'); err != nil {
		return c, fmt.Errorf("%w: only the ':' (equals) operator is supported", err)
	}
	if !p.eof() && (p.s[p.pos] == '\'' || p.s[p.pos] == '"') {
		v, err := p.quoted()
		if err != nil {
			return c, err
		}
		c.value = v
		return c, nil
	}
	c.value = p.word()
	if c.value == "" {
		return c, fmt.Errorf("expected a value at %d", p.pos)
	}
	return c, nil
}
