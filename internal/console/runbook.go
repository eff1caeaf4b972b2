package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"

	"github.com/oncepay/oncepay/docs"
)

// renderRunbook is docs/operations.md as HTML, for the console to serve
// so that each alert links to its entry where the operator already is:
// headings carry the ids an alert's runbook annotation names (GitHub's,
// for these headings), and raw HTML in the source is not passed through.
func renderRunbook() (template.HTML, error) {
	md := goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithParserOptions(parser.WithAutoHeadingID()))
	var b bytes.Buffer
	if err := md.Convert(docs.Operations, &b); err != nil {
		return "", fmt.Errorf("render docs/operations.md: %w", err)
	}
	return template.HTML(b.String()), nil //nolint:gosec // goldmark leaves out the source's raw HTML (no WithUnsafe)
}

// runbookLink is where the console serves a runbook annotation
// ("docs/operations.md#a-ledger-finding").
func runbookLink(annotation string) string {
	_, anchor, _ := strings.Cut(annotation, "#")
	return Path + "runbook#" + anchor
}

func (c *server) runbook(w http.ResponseWriter, r *http.Request) {
	if c.runbookErr != nil {
		c.fail(w, r, http.StatusInternalServerError, c.runbookErr)
		return
	}
	c.render(w, r, http.StatusOK, "runbook.html", map[string]any{"Title": "Runbook", "Body": c.runbookHTML})
}
