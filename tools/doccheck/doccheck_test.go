package doccheck_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// root is the repository, relative to this package's directory.
const root = "../.."

// block is one fenced code block of a page.
type block struct {
	lang  string
	line  int // of the opening fence, 1-based
	lines []string
	// source is the file a Go block is copied from, named by a
	// "<!-- doccheck: PATH -->" line just before the fence.
	source string
}

// page is a Markdown file, split into its prose and its code blocks.
type page struct {
	path string // relative to root
	// prose is the page's lines with those of code blocks blanked, so
	// that prose[i] is line i+1.
	prose    []string
	blocks   []block
	headings []string
}

var sourceMarker = regexp.MustCompile(`^<!-- doccheck: (\S+) -->$`)

func readPage(t *testing.T, path string) page {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	require.NoError(t, err)
	p := page{path: path}
	var open *block
	marker := ""
	for i, line := range strings.Split(string(data), "\n") {
		if open != nil {
			if strings.HasPrefix(line, "```") {
				p.blocks = append(p.blocks, *open)
				open = nil
				p.prose = append(p.prose, "")
				continue
			}
			open.lines = append(open.lines, line)
			p.prose = append(p.prose, "")
			continue
		}
		if fence, ok := strings.CutPrefix(line, "```"); ok {
			open = &block{lang: strings.TrimSpace(fence), line: i + 1, source: marker}
			p.prose = append(p.prose, "")
			continue
		}
		if m := sourceMarker.FindStringSubmatch(line); m != nil {
			marker = m[1]
			p.prose = append(p.prose, "")
			continue
		}
		if strings.TrimSpace(line) != "" {
			marker = ""
		}
		if h, ok := strings.CutPrefix(line, "#"); ok {
			p.headings = append(p.headings, slug(strings.TrimLeft(h, "#")))
		}
		p.prose = append(p.prose, line)
	}
	require.Nil(t, open, "%s: a code block is not closed", path)
	return p
}

// slug is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// pages are every Markdown page a user reads.
func pages(t *testing.T) []page {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	paths := []string{"README.md", "tools/bench/README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		require.NoError(t, err)
		paths = append(paths, filepath.ToSlash(rel))
	}
	var out []page
	for _, p := range paths {
		out = append(out, readPage(t, p))
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(filepath.Join(root, path))
	return err == nil
}

// TestTheREADMEIsTheShortFrontDoor: the README stays short, and leads to
// every page of docs/.
func TestTheREADMEIsTheShortFrontDoor(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	readme := string(data)
	require.LessOrEqual(t, strings.Count(readme, "\n"), 250, "README.md: the rest belongs in docs/")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, d := range docs {
		name := "docs/" + filepath.Base(d)
		require.Contains(t, readme, "]("+name+")", "README.md does not lead to %s", name)
	}
	first := strings.Index(readme, "```sh\nmake run")
	require.True(t, first > 0 && first < 600, "README.md: the two commands come first")
}

// maxLineLength bounds a line of a page's prose, in characters: a table
// too wide for it is better told as a list.
const maxLineLength = 120

// TestDocLinesAreShort: no line of a page outside its code blocks is longer
// than maxLineLength, but the line of enabled events in docs/operations.md,
// which TestEnabledEventsAreDocumented (internal/webhooks) reads whole.
func TestDocLinesAreShort(t *testing.T) {
	t.Parallel()
	for _, p := range pages(t) {
		for i, line := range p.prose {
			if p.path == "docs/operations.md" && strings.HasPrefix(line, "Enabled events:") {
				continue
			}
			if n := utf8.RuneCountInString(line); n > maxLineLength {
				t.Errorf("%s:%d is %d characters long: rewrap it, or make its table a list", p.path, i+1, n)
			}
		}
	}
}

// TestLinksResolve: every relative link of every page names a file that
// exists and, with an anchor, a heading of it; every alert's runbook link
// too.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	all := pages(t)
	headings := map[string][]string{}
	for _, p := range all {
		headings[p.path] = p.headings
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	resolve := func(from, target string) (string, string) {
		file, anchor, _ := strings.Cut(target, "#")
		if file == "" {
			return from, anchor
		}
		return filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), file))), anchor
	}
	checkAnchor := func(where, file, anchor string) {
		if anchor == "" {
			return
		}
		h, ok := headings[file]
		require.True(t, ok, "%s: the anchor #%s points into %s, which is not a checked page", where, anchor, file)
		require.Contains(t, h, anchor, "%s: %s has no heading #%s", where, file, anchor)
	}
	for _, p := range all {
		for _, line := range p.prose {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor := resolve(p.path, target)
				require.True(t, exists(file), "%s: the link %s names no file", p.path, target)
				checkAnchor(p.path, file, anchor)
			}
		}
	}

	data, err := os.ReadFile(filepath.Join(root, "deploy", "alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(data, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			file, anchor := resolve("", r.Annotations["runbook"])
			require.NotEmpty(t, anchor, "%s: its runbook link names no entry", r.Alert)
			checkAnchor("deploy/alerts.yml "+r.Alert, file, anchor)
		}
	}
}

// repoPath matches what reads as a path of this repository.
var repoPath = regexp.MustCompile(`^(?:cmd|internal|tools|deploy|docs|migrations|api|client|examples)/[A-Za-z0-9_./*-]*$`)

// TestPathsExist: every path a page names in code spans, in its layout
// listings and in its commands exists.
func TestPathsExist(t *testing.T) {
	t.Parallel()
	span := regexp.MustCompile("`([^`]+)`")
	inCommand := regexp.MustCompile(`(?:^|[\s"'(=:])(?:\./)?((?:cmd|internal|tools|deploy|docs|migrations|examples|client)/[A-Za-z0-9_./-]+)`)
	placeholder := regexp.MustCompile(`/[A-Z]+(/|$)`)
	check := func(where, path string) {
		if placeholder.MatchString(path) {
			return // tools/NAME/: a pattern, not a path
		}
		if strings.Contains(path, "*") {
			matches, err := filepath.Glob(filepath.Join(root, path))
			require.NoError(t, err)
			require.NotEmpty(t, matches, "%s: nothing matches %s", where, path)
			return
		}
		require.True(t, exists(path), "%s: %s does not exist", where, path)
	}
	for _, p := range pages(t) {
		for _, line := range p.prose {
			for _, m := range span.FindAllStringSubmatch(line, -1) {
				if repoPath.MatchString(m[1]) {
					check(p.path, m[1])
				}
			}
		}
		for _, b := range p.blocks {
			where := p.path + ":" + strconv.Itoa(b.line)
			for _, line := range b.lines {
				switch b.lang {
				case "sh":
					for _, m := range inCommand.FindAllStringSubmatch(stripComment(line), -1) {
						check(where, m[1])
					}
				case "":
					// A layout listing: "path/   what it holds".
					if first, _, _ := strings.Cut(strings.TrimSpace(line), " "); strings.HasSuffix(first, "/") &&
						repoPath.MatchString(first) {
						check(where, first)
					}
				}
			}
		}
	}
}

// stripComment drops a shell comment: a # outside quotes, at the start or
// after a space.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

// commands splits a shell line into its simple commands (at &&, ||, ;, |
// and & outside quotes), each as its words with quotes removed.
func commands(line string) [][]string {
	var (
		out    [][]string
		words  []string
		word   strings.Builder
		quote  rune
		inWord bool
	)
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCommand := func() {
		endWord()
		if len(words) > 0 {
			out = append(out, words)
		}
		words = nil
	}
	for _, r := range stripComment(line) {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			endWord()
		case r == '&' || r == '|' || r == ';':
			endCommand()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCommand()
	return out
}

// shellLines joins a block's continued lines.
func shellLines(lines []string) []string {
	var out []string
	var cur string
	for _, l := range lines {
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return out
}

// makeTargets are the Makefile's targets.
func makeTargets(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	var targets []string
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(data), -1) {
		targets = append(targets, m[1])
	}
	return targets
}

// binaries builds the programs whose subcommands and variables the pages
// describe.
var binaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "doccheck-bin-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/api", "./cmd/worker", "./tools/stripesim/cmd/stripesim")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return dir, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := binaries(); err == nil {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

// help runs a built program with args and --help.
func help(t *testing.T, program string, args ...string) string {
	t.Helper()
	dir, err := binaries()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(dir, program), append(slices.Clip(args), "--help")...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// accepts reports whether program takes the subcommand that words start
// with: its help for the longest prefix of words names that prefix.
func accepts(t *testing.T, program string, words []string) bool {
	t.Helper()
	for n := len(words); n > 0; n-- {
		sub := strings.Join(words[:n], " ")
		first, _, _ := strings.Cut(help(t, program, words[:n]...), "\n")
		if strings.HasPrefix(first, "usage: "+program+" "+sub) || strings.HasPrefix(first, "usage: "+program+" ["+sub+"]") {
			return true
		}
	}
	return false
}

// subcommand is the leading lower-case words of args: the subcommand they
// name, before its arguments and flags.
func subcommand(args []string) []string {
	word := regexp.MustCompile(`^[a-z][a-z-]*$`)
	n := 0
	for n < len(args) && word.MatchString(args[n]) {
		n++
	}
	return args[:n]
}

// TestCommandsExist: every command a page shows runs something that exists:
// make targets, `go run` of a program, the programs make build puts in
// bin/, and the subcommands of api and worker.
func TestCommandsExist(t *testing.T) {
	t.Parallel()
	targets := makeTargets(t)
	type call struct {
		where, program string
		words          []string
	}
	var calls []call
	checkCommand := func(where string, words []string) {
		for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
			words = words[1:]
		}
		if len(words) == 0 {
			return
		}
		switch name, args := words[0], words[1:]; {
		case name == "make":
			for _, a := range args {
				if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
					continue
				}
				require.Contains(t, targets, strings.Trim(a, "[]"), "%s: make has no target %q", where, a)
				break
			}
		case name == "go" && len(args) > 1 && args[0] == "run" && strings.HasPrefix(args[1], "./"):
			dir := strings.TrimPrefix(args[1], "./")
			mains, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
			require.NoError(t, err)
			require.NotEmpty(t, mains, "%s: go run %s: no such program", where, args[1])
			program := filepath.Base(dir)
			if program == "api" || program == "worker" {
				calls = append(calls, call{where, program, subcommand(args[2:])})
			}
		case strings.HasPrefix(name, "bin/"):
			program := strings.TrimPrefix(name, "bin/")
			built, err := filepath.Glob(filepath.Join(root, "tools", "*", "cmd", program))
			require.NoError(t, err)
			require.True(t, exists("cmd/"+program) || len(built) == 1, "%s: make build makes no %s", where, name)
			if program == "api" || program == "worker" {
				calls = append(calls, call{where, program, subcommand(args)})
			}
		case name == "api" || name == "worker":
			calls = append(calls, call{where, name, subcommand(args)})
		}
	}
	span := regexp.MustCompile("`((?:make|api|worker|bin/[a-z]+|go run) [^`]*)`")
	for _, p := range pages(t) {
		for i, line := range p.prose {
			for _, m := range span.FindAllStringSubmatch(line, -1) {
				for _, words := range commands(m[1]) {
					checkCommand(p.path+":"+strconv.Itoa(i+1), words)
				}
			}
		}
		for _, b := range p.blocks {
			where := p.path + ":" + strconv.Itoa(b.line)
			switch b.lang {
			case "sh":
				for _, line := range shellLines(b.lines) {
					for _, words := range commands(line) {
						checkCommand(where, words)
					}
				}
			case "":
				// A command listing: "command   what it does".
				for _, line := range b.lines {
					command, _, _ := strings.Cut(line, "  ")
					for _, words := range commands(strings.ReplaceAll(command, " / ", " ; ")) {
						if words[0] == "make" || words[0] == "go" {
							checkCommand(where, words)
						}
					}
				}
			}
		}
	}
	require.NotEmpty(t, calls)
	checked := map[string]bool{}
	for _, c := range calls {
		key := c.program + " " + strings.Join(c.words, " ")
		if len(c.words) == 0 || checked[key] {
			continue
		}
		checked[key] = true
		require.True(t, accepts(t, c.program, c.words), "%s: %s takes no subcommand %q", c.where, c.program, strings.Join(c.words, " "))
	}
}

// TestConfigurationMatchesTheBinaries: each section of
// docs/configuration.md names exactly the variables its binary's --help
// lists.
func TestConfigurationMatchesTheBinaries(t *testing.T) {
	t.Parallel()
	p := readPage(t, "docs/configuration.md")
	sections := map[string][]string{}
	program := ""
	variable := regexp.MustCompile("`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`")
	for _, line := range p.prose {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			program = ""
			for _, name := range []string{"api", "worker", "stripesim"} {
				if strings.Contains(h, "/"+name+"`") {
					program = name
				}
			}
			require.NotEmpty(t, program, "docs/configuration.md: the section %q names no program", h)
			continue
		}
		if program == "" {
			continue
		}
		for _, m := range variable.FindAllStringSubmatch(line, -1) {
			if !slices.Contains(sections[program], m[1]) {
				sections[program] = append(sections[program], m[1])
			}
		}
	}
	require.Len(t, sections, 3)
	for program, documented := range sections {
		var listed []string
		for _, line := range strings.Split(help(t, program), "\n") {
			if name := strings.TrimSpace(line); strings.HasPrefix(line, "  ") && variable.MatchString("`"+name+"`") {
				listed = append(listed, name)
			}
		}
		require.NotEmpty(t, listed, "%s --help lists no variables", program)
		slices.Sort(documented)
		require.Equal(t, listed, documented, "docs/configuration.md, the %s section, against %s --help", program, program)
	}
}

// TestGoBlocksAreTheCode: every Go block names the file it comes from, and
// its lines are that file's, in order (indentation aside; the first line
// may end a longer line, the last may begin one).
func TestGoBlocksAreTheCode(t *testing.T) {
	t.Parallel()
	for _, p := range pages(t) {
		for _, b := range p.blocks {
			if b.lang != "go" {
				continue
			}
			where := p.path + ":" + strconv.Itoa(b.line)
			require.NotEmpty(t, b.source, "%s: a Go block needs a <!-- doccheck: PATH --> line naming the file it comes from", where)
			data, err := os.ReadFile(filepath.Join(root, b.source))
			require.NoError(t, err, where)
			require.True(t, containsLines(strings.Split(string(data), "\n"), b.lines),
				"%s: this block is not the code of %s; copy it again from there", where, b.source)
		}
	}
}

func containsLines(file, block []string) bool {
	trim := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			out = append(out, strings.TrimSpace(l))
		}
		return out
	}
	file, block = trim(file), trim(block)
	for len(block) > 0 && block[len(block)-1] == "" {
		block = block[:len(block)-1]
	}
	if len(block) == 0 {
		return false
	}
	last := len(block) - 1
	for start := 0; start+len(block) <= len(file); start++ {
		ok := strings.HasSuffix(file[start], block[0])
		for i := 1; ok && i <= last; i++ {
			if i == last {
				ok = strings.HasPrefix(file[start+i], block[i])
			} else {
				ok = file[start+i] == block[i]
			}
		}
		if ok {
			return true
		}
	}
	return false
}
