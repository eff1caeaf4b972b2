package operator

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// writeJSON prints v as --json does: indented, "<" and ">" as they are.
func (c call) writeJSON(v any) error {
	enc := json.NewEncoder(c.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes rows under a header, aligned.
func (c call) table(header string, rows [][]string) error {
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// fields writes name/value pairs, aligned.
func (c call) fields(pairs ...string) error {
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(tw, "%s:\t%s\n", pairs[i], pairs[i+1])
	}
	return tw.Flush()
}

// ts is a moment as the tables print it: UTC, to the second, "-" for none.
func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// tsp is ts of a moment that may be missing.
func tsp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ts(*t)
}

// str is an optional text as the tables print it, "-" for none.
func str(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// orDash is s, or "-" for an empty s.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
