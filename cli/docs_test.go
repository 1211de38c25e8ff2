package cli_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/urfave/cli/v2"

	ffcli "github.com/flowforge/flowforge/cli"
)

// The documentation's checks: README.md stays a first page, every relative
// link of README.md and docs/*.md leads somewhere, and every ffctl command
// line they show names commands and flags ffctl has. They read the files of
// the repository (the test runs in cli/, so the root is ..).

// readmeMaxLines bounds README.md: the reference lives in docs/.
const readmeMaxLines = 250

// docsRoot is the repository root, seen from the cli package's directory.
const docsRoot = ".."

// docFiles returns the documentation the checks read: README.md and every
// docs/*.md, as slash paths relative to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

func readDoc(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocsReadmeIsAFirstPage: README.md is at most readmeMaxLines lines.
func TestDocsReadmeIsAFirstPage(t *testing.T) {
	t.Parallel()
	if p := readmeTooLong("README.md", readDoc(t, docsRoot, "README.md")); p != "" {
		t.Error(p)
	}
	if len(docFiles(t, docsRoot)) < 2 {
		t.Error("no docs/*.md: the reference README.md links to is missing")
	}
}

// TestDocsRelativeLinksResolve: every relative link of README.md and
// docs/*.md names a file that exists, and an #anchor into a markdown file
// names one of its headings (GitHub's slugs).
func TestDocsRelativeLinksResolve(t *testing.T) {
	t.Parallel()
	for _, name := range docFiles(t, docsRoot) {
		for _, p := range brokenLinks(docsRoot, name, readDoc(t, docsRoot, name)) {
			t.Error(p)
		}
	}
}

// TestDocsFfctlCommandsExist: every ffctl command line of README.md and
// docs/*.md — in a fenced code block, or an inline code span — names
// commands, subcommands and flags that ffctl has.
func TestDocsFfctlCommandsExist(t *testing.T) {
	t.Parallel()
	app := ffcli.NewApp(&ffcli.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	checked := 0
	for _, name := range docFiles(t, docsRoot) {
		problems, n := badCommands(app, name, readDoc(t, docsRoot, name))
		checked += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	if checked < 100 {
		t.Errorf("checked %d ffctl command lines: the extraction finds too few", checked)
	}
}

// TestDocsLayoutNamesEveryPackage: README.md's Layout block has a line for
// every directory of the repository that holds Go files (every package of
// go list ./..., and those of scripts/bench's own module).
func TestDocsLayoutNamesEveryPackage(t *testing.T) {
	t.Parallel()
	for _, p := range layoutGaps(t, docsRoot, readDoc(t, docsRoot, "README.md")) {
		t.Error(p)
	}
}

// layoutGaps returns a problem for each directory under root holding .go
// files that the Layout section of readme (its first code block after the
// "## Layout" heading) has no line for ("dir/  what it holds").
func layoutGaps(t *testing.T, root, readme string) []string {
	t.Helper()
	listed := map[string]bool{}
	inLayout := false
	for _, l := range mdLines(readme) {
		switch {
		case !l.inCode && strings.HasPrefix(l.text, "## "):
			inLayout = l.text == "## Layout"
		case inLayout && l.inCode:
			if f := strings.Fields(l.text); len(f) > 1 {
				listed[strings.TrimSuffix(f[0], "/")] = true
			}
		}
	}
	dirs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			dirs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 20 {
		t.Fatalf("found %d Go package directories: the walk is broken", len(dirs))
	}
	var problems []string
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if !listed[d] {
			problems = append(problems, fmt.Sprintf("README.md: the Layout section has no line for the Go package %s/", d))
		}
	}
	return problems
}

// TestDocsChecksCatchViolations feeds each check a violation of its rule
// and a line it must accept.
func TestDocsChecksCatchViolations(t *testing.T) {
	t.Parallel()
	app := ffcli.NewApp(&ffcli.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})

	if p := readmeTooLong("README.md", strings.Repeat("line\n", readmeMaxLines+1)); !strings.Contains(p, "251 lines") {
		t.Errorf("a 251-line README: %q", p)
	}
	if p := readmeTooLong("README.md", strings.Repeat("line\n", readmeMaxLines)); p != "" {
		t.Errorf("a 250-line README: %q", p)
	}

	gaps := layoutGaps(t, docsRoot, "## Layout\n\n```text\ncli/   ffctl\ncore/store/  SQL\n```\n")
	if len(gaps) == 0 || !slices.Contains(gaps, "README.md: the Layout section has no line for the Go package daemon/worker/") || slices.Contains(gaps, "README.md: the Layout section has no line for the Go package cli/") {
		t.Errorf("layout gaps of a two-line layout: %q", gaps)
	}

	root := t.TempDir()
	for name, text := range map[string]string{
		"docs/a.md": "# Page A\n\n## Exit codes\n\n## Exit codes\n\n## `-o json` shapes: Run & Task\n",
		"e2e/x.txt": "x",
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		line, want string // want "" means no problem
	}{
		{"see [a](docs/a.md) and [x](e2e/x.txt) and [web](https://example.com/nope)", ""},
		{"[codes](docs/a.md#exit-codes), [again](docs/a.md#exit-codes-1), [json](docs/a.md#-o-json-shapes-run--task)", ""},
		{"[top](#readme-heading)", ""},
		{"`[not a link](nowhere.md)` in code", ""},
		{"see [gone](docs/gone.md)", `README.md:1: link "docs/gone.md": docs/gone.md does not exist`},
		{"see [bad anchor](docs/a.md#exit-code)", `README.md:1: link "docs/a.md#exit-code": docs/a.md has no heading with anchor #exit-code`},
		{"see [self](#nothing-here)", `README.md:1: link "#nothing-here": README.md has no heading with anchor #nothing-here`},
	} {
		got := brokenLinks(root, "README.md", tc.line+"\n\n# Readme heading\n")
		if tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
			t.Errorf("links of %q: got %q, want %q", tc.line, got, tc.want)
		}
	}

	for _, tc := range []struct {
		doc, want string
	}{
		{"```sh\nffctl run frobnicate\n```\n", `docs/x.md:2: "frobnicate": ffctl run has no command frobnicate`},
		{"```sh\nffctl run trigger wordcount --nope\n```\n", `docs/x.md:2: "--nope": ffctl run trigger has no flag --nope`},
		{"```sh\n$ FOO=bar ffctl dead requeue ID \\\n    --reason R --bogus=1 | head\n```\n", `docs/x.md:2: "--bogus=1": ffctl dead requeue has no flag --bogus`},
		{"```sh\nid=$(ffctl run trigger w -o json) && ffctl run wat \"$id\"\n```\n", `docs/x.md:2: "wat": ffctl run has no command wat`},
		{"Use `ffctl schedule pause\\|resume NAME --reason R --mode drop`.\n", `docs/x.md:1: "--mode": ffctl schedule pause has no flag --mode`},
		{"```sh\nffctl daemon worker --concurrency 8 --lease 30s --queue q --database-url=U -h\n" +
			"ffctl workflow apply -f - --strict\n" +
			"ffctl run trigger NAME [--param k=v]... [--wait [--timeout D]] -o json 2>/dev/null # --no-such-flag in a comment\n" +
			"ffctl COMMAND --help; ffctl help run\n" +
			"source <(ffctl completion bash) && ffctl daemon all --prune=false &\n" +
			"ffctl __shell-supervisor -- 4242 /bin/sh sh -c 'make report'\n" +
			"echo ffctl run frobnicate   # not a command line of ffctl\n```\n" +
			"See `ffctl daemon all|scheduler|publisher|worker` and `ffctl dead requeue TASK_ID... --reason R -y`.\n", ""},
		{"```text\n   ffctl · scripts · the dashboard\n```\n```json\n\"ffctl run frobnicate\"\n```\n" +
			"```\ncli/ffctl    the binary (urfave/cli v2); cli/ffctl is the binary\n```\n", ""},
		{"```\nbin/ffctl outbox statu\n```\n", `docs/x.md:2: "statu": ffctl outbox has no command statu`},
	} {
		got, _ := badCommands(app, "docs/x.md", tc.doc)
		if tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)) {
			t.Errorf("commands of %q:\ngot  %q\nwant %q", tc.doc, got, tc.want)
		}
	}
}

// readmeTooLong says that text, README.md, has more than readmeMaxLines
// lines, or returns "".
func readmeTooLong(name, text string) string {
	n := strings.Count(text, "\n")
	if text != "" && !strings.HasSuffix(text, "\n") {
		n++
	}
	if n > readmeMaxLines {
		return fmt.Sprintf("%s has %d lines, more than %d: move reference material into docs/", name, n, readmeMaxLines)
	}
	return ""
}

// mdLine is one line of a markdown file: inCode says it is inside a fenced
// code block (the fences themselves are not), info is that block's info
// string ("sh", "json", "").
type mdLine struct {
	n      int // 1-based
	text   string
	inCode bool
	info   string
}

// fenceRe opens or closes a fenced code block.
var fenceRe = regexp.MustCompile("^\\s*(```+|~~~+)")

// mdLines splits text into lines and marks those of fenced code blocks.
func mdLines(text string) []mdLine {
	var out []mdLine
	fence, info := "", ""
	for i, l := range strings.Split(text, "\n") {
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			rest := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), m[1][:1]))
			switch {
			case fence == "":
				fence, info = m[1], rest
				continue
			case strings.HasPrefix(m[1], fence) && rest == "":
				fence, info = "", ""
				continue
			}
		}
		out = append(out, mdLine{n: i + 1, text: l, inCode: fence != "", info: info})
	}
	return out
}

// codeSpanRe is an inline code span (a run of backticks, then the same run).
var codeSpanRe = regexp.MustCompile("(`+)([^`]|[^`].*?[^`])(`+)")

// codeSpans returns the contents of the inline code spans of line.
func codeSpans(line string) []string {
	var out []string
	for _, m := range codeSpanRe.FindAllStringSubmatch(line, -1) {
		if m[1] == m[3] {
			out = append(out, strings.TrimSpace(m[2]))
		}
	}
	return out
}

// headingSlugs returns the anchors GitHub gives the headings of text.
func headingSlugs(text string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, l := range mdLines(text) {
		if l.inCode || !strings.HasPrefix(l.text, "#") {
			continue
		}
		h := strings.TrimLeft(l.text, "#")
		if h == "" || h[0] != ' ' {
			continue
		}
		s := githubSlug(strings.TrimRight(strings.TrimSpace(h), "# "))
		if n := seen[s]; n > 0 {
			slugs[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

// mdLinkRe is a markdown link or image: [text](target) or [text](target "title").
var mdLinkRe = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// githubSlug is GitHub's anchor for a heading: lower case, inline markup
// dropped, every character but letters, digits, marks, '_', '-' and
// spaces removed, spaces made hyphens.
func githubSlug(heading string) string {
	heading = mdLinkRe.ReplaceAllStringFunc(heading, func(s string) string {
		return s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// schemeRe starts an absolute URL (https:, mailto:, ...).
var schemeRe = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// brokenLinks returns a problem for each relative link of name (text is its
// content; root the repository) whose file does not exist, or whose #anchor
// into a markdown file names no heading of it.
func brokenLinks(root, name, text string) []string {
	var problems []string
	slugsOf := map[string]map[string]bool{name: headingSlugs(text)}
	for _, l := range mdLines(text) {
		if l.inCode {
			continue
		}
		line := codeSpanRe.ReplaceAllString(l.text, "")
		for _, m := range mdLinkRe.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if schemeRe.MatchString(target) || strings.HasPrefix(target, "//") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := name
			if file != "" {
				dest = path.Join(path.Dir(name), file)
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s does not exist", name, l.n, target, dest))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if slugsOf[dest] == nil {
				b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(dest)))
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: link %q: %v", name, l.n, target, err))
					continue
				}
				slugsOf[dest] = headingSlugs(string(b))
			}
			if !slugsOf[dest][anchor] {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s has no heading with anchor #%s", name, l.n, target, dest, anchor))
			}
		}
	}
	return problems
}

// shellWord is one word of a command line; quoted words are never flags
// or command names.
type shellWord struct {
	text   string
	quoted bool
}

// shellCommands splits a shell line into its simple commands: it cuts at
// |, ||, &&, ;, & (background), ( and ) (so $(...) and <(...) are
// commands of their own) and backticks, drops a # comment, and keeps
// quoted strings whole. A | inside a word (a synopsis's "queue|drop") is
// part of the word.
func shellCommands(line string) [][]shellWord {
	var cmds [][]shellWord
	var cur []shellWord
	var word strings.Builder
	inWord, quoted := false, false
	endWord := func() {
		if inWord {
			cur = append(cur, shellWord{text: word.String(), quoted: quoted})
		}
		word.Reset()
		inWord, quoted = false, false
	}
	endCmd := func() {
		endWord()
		if len(cur) > 0 {
			cmds = append(cmds, cur)
		}
		cur = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\'' || r == '"':
			j := i + 1
			for j < len(rs) && rs[j] != r {
				if r == '"' && rs[j] == '\\' {
					j++
				}
				j++
			}
			if j > len(rs) {
				j = len(rs)
			}
			word.WriteString(string(rs[i+1 : min(j, len(rs))]))
			inWord, quoted = true, true
			i = j
		case r == '\\' && i+1 < len(rs):
			word.WriteRune(rs[i+1])
			inWord = true
			i++
		case unicode.IsSpace(r):
			endWord()
		case r == '#' && !inWord:
			endCmd()
			return cmds
		case r == ';' || r == '(' || r == ')' || r == '`':
			endCmd()
		case r == '|' && (!inWord || i+1 < len(rs) && rs[i+1] == '|'):
			endCmd()
			if i+1 < len(rs) && rs[i+1] == '|' {
				i++
			}
		case r == '&' && i+1 < len(rs) && rs[i+1] == '&':
			endCmd()
			i++
		case r == '&' && !inWord:
			endCmd()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// assignmentRe is an environment assignment before a command (FOO=bar).
var assignmentRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// shellPrefixes are the words that may come before a command name.
var shellPrefixes = []string{"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "exec", "command", "env", "nohup", "sudo"}

// ffctlArgs returns the arguments of cmd when it runs ffctl (ffctl,
// ./ffctl or .../bin/ffctl, after any environment assignments and shell
// keywords), and whether it does.
func ffctlArgs(cmd []shellWord) ([]shellWord, bool) {
	for i, w := range cmd {
		switch {
		case !w.quoted && (assignmentRe.MatchString(w.text) || slices.Contains(shellPrefixes, w.text)):
			continue
		case !w.quoted && (w.text == "ffctl" || w.text == "./ffctl" || strings.HasSuffix(w.text, "bin/ffctl")):
			return cmd[i+1:], true
		}
		return nil, false
	}
	return nil, false
}

// cmdNode is a command of the tree (nil: the app itself) with its path.
type cmdNode struct {
	cmd  *cli.Command
	path string
}

func (n cmdNode) subcommands(app *cli.App) []*cli.Command {
	if n.cmd == nil {
		return app.Commands
	}
	return n.cmd.Subcommands
}

// placeholderRe is a positional placeholder: ID, RUN_ID, NAME..., <file>.
var placeholderRe = regexp.MustCompile(`^([A-Z][A-Z0-9_]*(\.\.\.|…)?|<.*>)$`)

// redirectRe is a shell redirection (>, 2>&1, >/dev/null, <file).
var redirectRe = regexp.MustCompile(`^[0-9&]*[<>]`)

// shellInfos are the info strings of the fenced code blocks whose lines
// are command lines; a block marked otherwise (text, json, yaml, go) holds
// none.
var shellInfos = []string{"", "sh", "shell", "bash", "zsh", "console"}

// badCommands returns a problem for each command, subcommand or flag that
// an ffctl command line of name (its content text) names and app does not
// have, and how many ffctl command lines it checked. It reads the lines of
// shell code blocks (joining \ continuations, dropping a "$ " prompt) and
// the inline code spans of the other lines.
func badCommands(app *cli.App, name, text string) (problems []string, checked int) {
	check := func(n int, line string) {
		for _, cmd := range shellCommands(line) {
			if args, ok := ffctlArgs(cmd); ok {
				checked++
				if p := checkFfctl(app, args); p != "" {
					problems = append(problems, fmt.Sprintf("%s:%d: %s (in: %s)", name, n, p, strings.TrimSpace(line)))
				}
			}
		}
	}
	lines := mdLines(text)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !l.inCode {
			for _, span := range codeSpans(l.text) {
				if strings.Contains(span, "ffctl") {
					check(l.n, strings.ReplaceAll(span, `\|`, "|"))
				}
			}
			continue
		}
		if !slices.Contains(shellInfos, l.info) {
			continue
		}
		line := l.text
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) && lines[i+1].inCode {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + lines[i].text
		}
		line = strings.TrimSpace(line)
		line = strings.TrimPrefix(line, "$ ")
		check(l.n, line)
	}
	return problems, checked
}

// checkFfctl walks args (what follows "ffctl") down app's command tree and
// returns the first command or flag that does not exist, or "". A word
// a|b names alternatives, each of which must exist; [ ] and ... of a
// synopsis are ignored; placeholders, quoted and $-words are positional.
func checkFfctl(app *cli.App, args []shellWord) string {
	cur := []cmdNode{{path: "ffctl"}}
	walking := true
	for i := 0; i < len(args); i++ {
		w := args[i]
		tok := w.text
		if !w.quoted {
			tok = strings.TrimRight(strings.TrimLeft(tok, "["), "].…")
		}
		switch {
		case tok == "" || w.quoted:
			walking = walking && tok == "" // a quoted word is an argument
			continue
		case tok == "--":
			return ""
		case redirectRe.MatchString(tok):
			if strings.TrimLeft(tok, "0123456789&<>") == "" {
				i++ // the redirection's target
			}
			continue
		case strings.HasPrefix(tok, "-") && tok != "-":
			flagName, _, hasValue := strings.Cut(strings.TrimLeft(tok, "-"), "=")
			takesValue := false
			for _, n := range cur {
				f, ok := lookupFlag(app, n, flagName)
				if !ok {
					return fmt.Sprintf("%q: %s has no flag %s", w.text, n.path, dashes(flagName))
				}
				_, isBool := f.(*cli.BoolFlag)
				takesValue = takesValue || f != nil && !isBool
			}
			if takesValue && !hasValue {
				i++
			}
			continue
		}
		if !walking || len(cur[0].subcommands(app)) == 0 || placeholderRe.MatchString(tok) || strings.HasPrefix(tok, "$") {
			walking = false // a positional argument
			continue
		}
		if tok == "help" || tok == "h" {
			return "" // the words after it are command names, read by help
		}
		var next []cmdNode
		for _, n := range cur {
			for _, alt := range strings.Split(tok, "|") {
				c := findCommand(n.subcommands(app), alt)
				if c == nil {
					return fmt.Sprintf("%q: %s has no command %s", w.text, n.path, alt)
				}
				if c.SkipFlagParsing {
					return ""
				}
				next = append(next, cmdNode{cmd: c, path: n.path + " " + c.Name})
			}
		}
		cur = next
	}
	return ""
}

func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

// lookupFlag finds the flag name of node n: its own, its ancestors' (the
// path from the app), the app's global flags, and the library's --help
// (everywhere) and --version (of the app). The flag is nil for the
// library's, which take no value.
func lookupFlag(app *cli.App, n cmdNode, name string) (cli.Flag, bool) {
	if name == "help" || name == "h" || n.cmd == nil && (name == "version" || name == "v") {
		return nil, true
	}
	sets := [][]cli.Flag{app.Flags}
	cmds := app.Commands
	for _, word := range strings.Fields(n.path)[1:] {
		c := findCommand(cmds, word)
		if c == nil {
			break
		}
		sets = append(sets, c.Flags)
		cmds = c.Subcommands
	}
	for _, set := range sets {
		for _, f := range set {
			if slices.Contains(f.Names(), name) {
				return f, true
			}
		}
	}
	return nil, false
}
