package api

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMarkdown: the reference renders the CommonMark the document's
// descriptions use, leaves out raw HTML and dangerous links, and puts a
// table cell's one paragraph in the cell without the paragraph.
func TestMarkdown(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"A **202**, then `201`.":            "<p>A <strong>202</strong>, then <code>201</code>.</p>",
		"see [the keys](/docs/idempotency)": `<p>see <a href="/docs/idempotency">the keys</a></p>`,
		"`**not bold**` and <b>bold</b>":    "<p><code>**not bold**</code> and <!-- raw HTML omitted -->bold<!-- raw HTML omitted --></p>",
		"[x](javascript:alert(1))":          `<p><a href="">x</a></p>`,
	} {
		require.Equal(t, want, markdown(in), in)
	}
	require.Equal(t, "<p>Intro</p>\n<ul>\n<li>one\nmore</li>\n<li>two</li>\n</ul>\n<p>End</p>", markdown("Intro\n\n- one\n  more\n- two\n\nEnd"))
	require.Equal(t, "A <strong>202</strong>", markdownInline("A **202**\n"))
	require.Equal(t, "<p>one</p>\n<p>two</p>", markdownInline("one\n\ntwo"))
}

// FuzzMarkdown: whatever a description holds, the rendered HTML has only
// the tags CommonMark makes and no link or image to a script or data.
func FuzzMarkdown(f *testing.F) {
	for _, seed := range []string{"**a** `b` [c](/d)", "- x\n- y", "<script>alert(1)</script>", "`<b>`", "[a](/b\"onclick=x)",
		"\x00", "**`x**`", "![i](javascript:x)", "<a href=javascript:x>y</a>", "# h\n\n> q\n\n```\n<b>\n```"} {
		f.Add(seed)
	}
	tag := regexp.MustCompile(`<(/?)([a-zA-Z][a-zA-Z0-9]*)([^>]*)>`)
	made := regexp.MustCompile(`^(p|ul|ol|li|code|pre|strong|em|a|img|h[1-6]|blockquote|hr|br)$`)
	unsafe := regexp.MustCompile(`(?i)(href|src)="\s*(javascript|vbscript|data|file):`)
	f.Fuzz(func(t *testing.T, text string) {
		for _, out := range []string{markdown(text), markdownInline(text)} {
			for _, m := range tag.FindAllStringSubmatch(out, -1) {
				if !made.MatchString(m[2]) {
					t.Fatalf("tag %q in %q, from %q", m[0], out, text)
				}
			}
			if unsafe.MatchString(out) || strings.Contains(strings.ToLower(out), "<script") {
				t.Fatalf("an unsafe link in %q, from %q", out, text)
			}
		}
	})
}
