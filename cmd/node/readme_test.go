package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmePath is README.md, from this package's directory; docsGlob the
// reference pages beside it.
const (
	readmePath = "../../README.md"
	docsGlob   = "../../docs/*.md"
)

// README.md and the pages of docs/ mark the examples this file runs with
// HTML comments, which readers do not see:
//
//	<!-- readme-test: node -->     the next ```sh block starts the node of
//	                               the page: ./ratesync-node ARGS..., after
//	                               an optional go build -o ratesync-node
//	                               ./cmd/node
//	<!-- readme-test -->           the next ```sh block holds curl commands;
//	                               the fenced block after it is what the
//	                               last one printed
//	<!-- readme-test: excerpt -->  the same, where the fenced block holds
//	                               some of the lines the last one printed
//	<!-- readme-test: nodes -->    the next ```sh block holds command lines
//	                               that start a node, each started in turn
//	                               (TestDocsNodeCommands)
//	<!-- readme-test: config -->   a ```yaml block, the file node.yaml; a
//	                               ```sh block running the node with it; the
//	                               fenced block of what the node printed as
//	                               it refused the file (TestDocsConfigErrors)
//	<!-- readme-test: config-valid -->
//	                               a ```yaml block, a whole configuration
//	                               file the node accepts
//	                               (TestDocsConfigFiles)
//	<!-- readme-test: file PATH -->
//	                               a ```yaml block whose lines are lines of
//	                               the repository's file PATH, in a row
//	                               (TestDocsConfigFiles)
//	<!-- readme-test: gateway-timeout -->
//	                               a fenced block: the gateway's answer
//	                               when its upstream times out
//	                               (TestDocsGatewayTimeout)
//	<!-- readme-test: example -->  a ```go block that the ratelimiting
//	<!-- readme-test: go NAME -->  package's tests check (readme_test.go and
//	                               docs_test.go there); skipped here
//
// TestReadmeAPI starts, for each page with a node block, the node with the
// page's arguments (and -listen on a free port), runs every marked command
// in page order against it, and compares what curl would print with the
// page's output: the status line, the set of header names (in the case the
// server sent them, as curl prints them), the values of the headers that do
// not depend on the time, that a Content-Length shown is the length of the
// body shown, and the body: JSON compared field by field, except fields
// whose value depends on the clock (readmeClockFields); any other body
// compared exactly.
const (
	readmeMarkPrefix   = "<!-- readme-test"
	readmeNodeMark     = "<!-- readme-test: node -->"
	readmeCurlMark     = "<!-- readme-test -->"
	readmeExcerptMark  = "<!-- readme-test: excerpt -->"
	readmeNodesMark    = "<!-- readme-test: nodes -->"
	readmeConfigMark   = "<!-- readme-test: config -->"
	readmeExampleMark  = "<!-- readme-test: example -->"
	readmeGoMarkPrefix = "<!-- readme-test: go "
	readmeValidMark    = "<!-- readme-test: config-valid -->"
	readmeFilePrefix   = "<!-- readme-test: file "
	readmeTimeoutMark  = "<!-- readme-test: gateway-timeout -->"
)

// readmeBuild is the build command a node block may show before the node's.
const readmeBuild = "go build -o ratesync-node ./cmd/node"

// readmeClockFields are the JSON fields whose values depend on when the
// command runs (the time within the window, or a window boundary crossed
// between two commands): their values are not compared, their presence and
// type are.
var readmeClockFields = []string{"reset_ms", "retry_after_ms", "durationUntilReset", "window_start_ms", "weight", "rate", "current", "previous", "duration_ms"}

// readmeClockHeaders are the headers whose values depend on the time.
// Content-Length does with them, and is checked against the body shown.
var readmeClockHeaders = []string{"Date", "Content-Length", "Ratelimit", "Retry-After", "X-Ratelimit-Reset"}

// readmeEnv is the environment of the node and of the commands' shell
// variables: none set, as in a fresh shell.
var readmeEnv = map[string]string{}

// readmeBlock is one marked block of a page.
type readmeBlock struct {
	line     int    // the page's line of the marker
	mark     string // the marker
	file     string // config blocks: the ```yaml block
	commands string // the ```sh block
	output   string // the fenced block after it (curl and config blocks)
}

// docPages returns README.md and the pages of docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(docsGlob)
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{readmePath}, pages...)
}

// pageBlocks returns the marked blocks of page.
func pageBlocks(t *testing.T, page string) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := parseReadme(string(data))
	if err != nil {
		t.Fatalf("%s: %v", page, err)
	}
	return blocks
}

func TestReadmeAPI(t *testing.T) {
	tested := 0
	for _, page := range docPages(t) {
		var blocks []readmeBlock
		for _, b := range pageBlocks(t, page) {
			if b.mark == readmeNodeMark || b.mark == readmeCurlMark || b.mark == readmeExcerptMark {
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			continue
		}
		tested++
		t.Run(filepath.Base(page), func(t *testing.T) { testPageAPI(t, page, blocks) })
	}
	if tested < 4 {
		t.Errorf("%d pages with curl examples, want README.md, docs/http-api.md, docs/envoy.md and docs/metrics.md at least", tested)
	}
}

// testPageAPI runs the node and curl blocks of one page.
func testPageAPI(t *testing.T, page string, blocks []readmeBlock) {
	if len(blocks) < 2 || blocks[0].mark != readmeNodeMark {
		t.Fatalf("%s: want a %q block and then %q blocks; found %d marked blocks", page, readmeNodeMark, readmeCurlMark, len(blocks))
	}
	args, err := readmeNodeArgs(blocks[0].commands)
	if err != nil {
		t.Fatalf("%s:%d: %v", page, blocks[0].line, err)
	}
	args = append(args, "-listen", "127.0.0.1:0")
	if i := slices.Index(args, "-config"); i >= 0 && i+1 < len(args) {
		if data, err := os.ReadFile(args[i+1]); err == nil && strings.Contains("\n"+string(data), "\nrls:") {
			args = append(args, "-rls-listen", "127.0.0.1:0") // no fixed port in a test
		}
	}
	base, _, stop := runNode(t, args, nil)
	api, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks[1:] {
		if b.mark == readmeNodeMark {
			t.Fatalf("%s:%d: a second node block; one node serves every command of a page", page, b.line)
		}
		cmds, err := shellCommands(b.commands, readmeEnv)
		if err != nil {
			t.Fatalf("%s:%d: %v", page, b.line, err)
		}
		var got curlOutput
		for _, words := range cmds {
			req, err := parseCurl(words)
			if err != nil {
				t.Fatalf("%s:%d: %v", page, b.line, err)
			}
			if got, err = req.do(api.Host); err != nil {
				t.Fatalf("%s:%d: %s: %v", page, b.line, strings.Join(words, " "), err)
			}
		}
		if b.mark == readmeExcerptMark {
			lines := strings.Split(got.body, "\n")
			for _, l := range strings.Split(b.output, "\n") {
				if !slices.Contains(lines, l) {
					t.Errorf("%s:%d: the node's answer lacks the line\n%s\nthe node answered:\n%s", page, b.line, l, got.text)
				}
			}
			continue
		}
		want, err := parseCurlOutput(b.output, got.headers != nil)
		if err != nil {
			t.Fatalf("%s:%d: the page's output: %v", page, b.line, err)
		}
		for _, d := range compareCurlOutput(want, got) {
			t.Errorf("%s:%d: %s\nthe page shows:\n%s\nthe node answered:\n%s", page, b.line, d, b.output, got.text)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("the node's stop: %v", err)
	}
}

// parseReadme returns a page's marked blocks in order.
func parseReadme(readme string) ([]readmeBlock, error) {
	lines := strings.Split(readme, "\n")
	// fence returns the fenced block starting at or after line i (skipping
	// blank lines only): its info string, its body and the line after it.
	fence := func(i int) (info, body string, next int, err error) {
		for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
			i++
		}
		if i >= len(lines) || !strings.HasPrefix(lines[i], "```") {
			return "", "", i, fmt.Errorf("line %d: want a fenced block", i+1)
		}
		info = strings.TrimPrefix(lines[i], "```")
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "```") {
				return info, strings.Join(lines[i+1:j], "\n"), j + 1, nil
			}
		}
		return "", "", i, fmt.Errorf("line %d: fenced block not closed", i+1)
	}
	// want reads the fenced block at or after line i, of one of the info
	// strings infos.
	want := func(i int, what string, infos ...string) (body string, next int, err error) {
		info, body, next, err := fence(i)
		if err != nil {
			return "", next, fmt.Errorf("%s: %v", what, err)
		}
		if !slices.Contains(infos, info) {
			return "", next, fmt.Errorf("line %d: %s is %q, want %q", i+1, what, "```"+info, "```"+infos[0])
		}
		return body, next, nil
	}
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		mark := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(mark, readmeMarkPrefix) {
			continue
		}
		b := readmeBlock{line: i + 1, mark: mark}
		next := i + 1
		var err error
		switch {
		case mark == readmeExampleMark, strings.HasPrefix(mark, readmeGoMarkPrefix) && strings.HasSuffix(mark, " -->"):
			_, next, err = want(next, "the block after the marker", "go")
		case mark == readmeNodeMark, mark == readmeNodesMark:
			b.commands, next, err = want(next, "the block after the marker", "sh")
		case mark == readmeCurlMark, mark == readmeExcerptMark:
			if b.commands, next, err = want(next, "the block after the marker", "sh"); err == nil {
				b.output, next, err = want(next, "the output after the commands", "", "text")
			}
		case mark == readmeTimeoutMark:
			b.output, next, err = want(next, "the block after the marker", "", "text")
		case mark == readmeValidMark:
			b.file, next, err = want(next, "the block after the marker", "yaml")
		case strings.HasPrefix(mark, readmeFilePrefix) && strings.HasSuffix(mark, " -->"):
			b.commands = strings.TrimSuffix(strings.TrimPrefix(mark, readmeFilePrefix), " -->")
			b.file, next, err = want(next, "the block after the marker", "yaml")
		case mark == readmeConfigMark:
			if b.file, next, err = want(next, "the block after the marker", "yaml"); err == nil {
				if b.commands, next, err = want(next, "the command after the file", "sh"); err == nil {
					b.output, next, err = want(next, "the output after the command", "", "text")
				}
			}
		default:
			return nil, fmt.Errorf("line %d: unknown marker %q", i+1, mark)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", b.line, err)
		}
		blocks = append(blocks, b)
		i = next - 1
	}
	return blocks, nil
}

// readmeNodeArgs returns the arguments of a node block's command line, with
// paths of files in the repository made relative to this directory.
func readmeNodeArgs(block string) ([]string, error) {
	cmds, err := shellCommands(block, readmeEnv)
	if err != nil {
		return nil, err
	}
	if len(cmds) == 2 && strings.Join(cmds[0], " ") == readmeBuild {
		cmds = cmds[1:]
	}
	if len(cmds) != 1 || cmds[0][0] != "./ratesync-node" {
		return nil, fmt.Errorf("want one command, ./ratesync-node ARGS..., after an optional %s; got %q", readmeBuild, cmds)
	}
	return repoPaths(cmds[0][1:]), nil
}

// repoPaths returns args with the paths of files in the repository made
// relative to this directory.
func repoPaths(args []string) []string {
	args = slices.Clone(args)
	for i, a := range args {
		if p := filepath.Join("..", "..", a); !strings.HasPrefix(a, "-") && fileExists(p) {
			args[i] = p
		}
	}
	return args
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// shellCommands splits a block of sh into commands and their words, the
// way sh would for the little README uses: single and double quotes
// (newlines inside quotes kept), backslash escapes and line continuations,
// $NAME and ${NAME} from env (outside single quotes), comments. Anything
// else (pipes, redirections, ;, &, $(...)) is an error, so that README
// cannot show a command this test does not run as written.
func shellCommands(block string, env map[string]string) ([][]string, error) {
	var (
		cmds   [][]string
		words  []string
		word   strings.Builder
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
			cmds = append(cmds, words)
			words = nil
		}
	}
	expand := func(rs []rune, i int) (int, error) { // rs[i] == '$'
		j := i + 1
		braced := j < len(rs) && rs[j] == '{'
		if braced {
			j++
		}
		k := j
		for k < len(rs) && (rs[k] == '_' || rs[k] >= 'A' && rs[k] <= 'Z' || rs[k] >= 'a' && rs[k] <= 'z' || k > j && rs[k] >= '0' && rs[k] <= '9') {
			k++
		}
		if k == j || braced && (k >= len(rs) || rs[k] != '}') {
			return 0, fmt.Errorf("unsupported $ expansion at %q", string(rs[i:min(len(rs), i+10)]))
		}
		word.WriteString(env[string(rs[j:k])])
		inWord = true
		if braced {
			k++
		}
		return k, nil
	}
	rs := []rune(block)
	for i := 0; i < len(rs); {
		c := rs[i]
		switch {
		case c == '\\' && i+1 < len(rs) && rs[i+1] == '\n':
			i += 2
		case c == '\\' && i+1 < len(rs):
			word.WriteRune(rs[i+1])
			inWord = true
			i += 2
		case c == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, fmt.Errorf("unterminated ' quote")
			}
			word.WriteString(string(rs[i+1 : j]))
			inWord = true
			i = j + 1
		case c == '"':
			inWord = true
			i++
			for {
				if i == len(rs) {
					return nil, fmt.Errorf("unterminated \" quote")
				}
				if rs[i] == '"' {
					i++
					break
				}
				switch {
				case rs[i] == '\\' && i+1 < len(rs) && strings.ContainsRune("$`\"\\\n", rs[i+1]):
					if rs[i+1] != '\n' {
						word.WriteRune(rs[i+1])
					}
					i += 2
				case rs[i] == '$':
					var err error
					if i, err = expand(rs, i); err != nil {
						return nil, err
					}
				case rs[i] == '`':
					return nil, fmt.Errorf("unsupported command substitution")
				default:
					word.WriteRune(rs[i])
					i++
				}
			}
		case c == '$':
			var err error
			if i, err = expand(rs, i); err != nil {
				return nil, err
			}
		case c == '#' && !inWord:
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case c == '\n':
			endCommand()
			i++
		case c == ' ' || c == '\t':
			endWord()
			i++
		case strings.ContainsRune("|&;<>()`", c):
			return nil, fmt.Errorf("unsupported shell syntax %q", c)
		default:
			word.WriteRune(c)
			inWord = true
			i++
		}
	}
	endCommand()
	return cmds, nil
}

// curlRequest is a curl command line: the options README uses.
type curlRequest struct {
	method  string
	target  *url.URL
	headers []string // "Name: value", as given to -H
	data    *string  // -d
	include bool     // -i: print the status line and headers
}

func parseCurl(words []string) (curlRequest, error) {
	var r curlRequest
	if len(words) == 0 || words[0] != "curl" {
		return r, fmt.Errorf("%q: not a curl command", words)
	}
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() (string, error) {
			if i+1 >= len(words) {
				return "", fmt.Errorf("curl %s: needs an argument", w)
			}
			i++
			return words[i], nil
		}
		var err error
		switch w {
		case "-s", "--silent", "-S", "--show-error":
		case "-i", "--include":
			r.include = true
		case "-X", "--request":
			r.method, err = arg()
		case "-H", "--header":
			var h string
			if h, err = arg(); err == nil {
				r.headers = append(r.headers, h)
			}
		case "-d", "--data":
			var d string
			if d, err = arg(); err == nil {
				r.data = &d
			}
		default:
			if strings.HasPrefix(w, "-") {
				return r, fmt.Errorf("curl option %s: not supported by this test", w)
			}
			if r.target != nil {
				return r, fmt.Errorf("curl: a second URL %q", w)
			}
			if !strings.Contains(w, "://") {
				w = "http://" + w // curl's default scheme
			}
			if r.target, err = url.Parse(w); err != nil {
				return r, err
			}
		}
		if err != nil {
			return r, err
		}
	}
	if r.target == nil {
		return r, fmt.Errorf("curl: no URL")
	}
	if r.method == "" {
		r.method = "GET"
		if r.data != nil {
			r.method = "POST"
		}
	}
	return r, nil
}

// curlOutput is what curl prints: with -i, the status line and the header
// fields as the server sent them, then the body.
type curlOutput struct {
	status  string
	headers [][2]string // nil without -i
	body    string
	text    string // all of it, as curl prints it
}

// do sends r to addr (README's host and port replaced) as curl would, over
// a raw connection so that header names keep the case the server sent.
func (r curlRequest) do(addr string) (curlOutput, error) {
	var out curlOutput
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return out, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: curl\r\nAccept: */*\r\n", r.method, r.target.RequestURI(), r.target.Host)
	for _, h := range r.headers {
		fmt.Fprintf(&req, "%s\r\n", h)
	}
	if r.data != nil {
		fmt.Fprintf(&req, "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n", len(*r.data))
	}
	req.WriteString("\r\n")
	if r.data != nil {
		req.WriteString(*r.data)
	}
	if _, err := conn.Write(req.Bytes()); err != nil {
		return out, err
	}
	br := bufio.NewReader(conn)
	line := func() (string, error) {
		s, err := br.ReadString('\n')
		return strings.TrimRight(s, "\r\n"), err
	}
	if out.status, err = line(); err != nil {
		return out, fmt.Errorf("status line: %w", err)
	}
	length, chunked := -1, false
	out.headers = [][2]string{}
	for {
		h, err := line()
		if err != nil {
			return out, fmt.Errorf("headers: %w", err)
		}
		if h == "" {
			break
		}
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return out, fmt.Errorf("header line %q", h)
		}
		value = strings.TrimSpace(value)
		out.headers = append(out.headers, [2]string{name, value})
		switch strings.ToLower(name) {
		case "content-length":
			if length, err = strconv.Atoi(value); err != nil {
				return out, fmt.Errorf("Content-Length %q", value)
			}
		case "transfer-encoding":
			chunked = strings.EqualFold(value, "chunked")
		}
	}
	var body []byte
	switch {
	case chunked:
		body, err = io.ReadAll(httputil.NewChunkedReader(br))
	case length >= 0:
		body = make([]byte, length)
		_, err = io.ReadFull(br, body)
	default:
		body, err = io.ReadAll(br)
	}
	if err != nil {
		return out, fmt.Errorf("body: %w", err)
	}
	out.body = string(body)
	var text strings.Builder
	if r.include {
		text.WriteString(out.status + "\n")
		for _, h := range out.headers {
			text.WriteString(h[0] + ": " + h[1] + "\n")
		}
		text.WriteString("\n")
	} else {
		out.headers = nil
	}
	text.WriteString(out.body)
	out.text = text.String()
	return out, nil
}

// parseCurlOutput parses README's output block: with headers (curl -i),
// the status line, the header lines, a blank line, the body.
func parseCurlOutput(block string, headers bool) (curlOutput, error) {
	out := curlOutput{text: block}
	if !headers {
		out.body = block
		return out, nil
	}
	head, body, _ := strings.Cut(block, "\n\n")
	lines := strings.Split(head, "\n")
	out.status, out.body = lines[0], body
	if !strings.HasPrefix(out.status, "HTTP/") {
		return out, fmt.Errorf("the command prints headers (-i), and the output starts with %q, not a status line", out.status)
	}
	out.headers = [][2]string{}
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return out, fmt.Errorf("header line %q", l)
		}
		out.headers = append(out.headers, [2]string{name, strings.TrimSpace(value)})
	}
	return out, nil
}

// compareCurlOutput returns how got differs from README's want.
func compareCurlOutput(want, got curlOutput) []string {
	var diffs []string
	if got.headers != nil && want.status != got.status { // without -i curl prints the body alone
		diffs = append(diffs, fmt.Sprintf("status line %q, README shows %q", got.status, want.status))
	}
	names := func(hs [][2]string) []string {
		var ns []string
		for _, h := range hs {
			ns = append(ns, h[0])
		}
		slices.Sort(ns)
		return ns
	}
	if w, g := names(want.headers), names(got.headers); !slices.Equal(w, g) {
		diffs = append(diffs, fmt.Sprintf("header names %q, README shows %q", g, w))
	} else {
		for i, h := range want.headers {
			j := slices.IndexFunc(got.headers, func(g [2]string) bool { return g[0] == h[0] })
			if !slices.Contains(readmeClockHeaders, h[0]) && got.headers[j][1] != h[1] {
				diffs = append(diffs, fmt.Sprintf("header %s: %q, README shows %q", h[0], got.headers[j][1], want.headers[i][1]))
			}
		}
	}
	if w, g := headerValue(want.headers, "Content-Length"), headerValue(got.headers, "Content-Length"); w != "" && g != "" {
		// The page shows the body without the newline that ends it, if any.
		wl, _ := strconv.Atoi(w)
		gl, _ := strconv.Atoi(g)
		gb := strings.TrimSuffix(got.body, "\n")
		if wl-len(want.body) != gl-len(gb) {
			diffs = append(diffs, fmt.Sprintf("Content-Length %d shown for a body of %d bytes; the node sends Content-Length %d for a body of %d bytes and %d after it", wl, len(want.body), gl, len(gb), gl-len(gb)))
		}
	}
	wb, gb := strings.TrimSpace(want.body), strings.TrimSpace(got.body)
	var wj, gj any
	if json.Unmarshal([]byte(wb), &wj) == nil {
		if err := json.Unmarshal([]byte(gb), &gj); err != nil {
			return append(diffs, fmt.Sprintf("body is not JSON (%v), README shows JSON", err))
		}
		return append(diffs, compareJSON("body", wj, gj)...)
	}
	if wb != gb {
		diffs = append(diffs, fmt.Sprintf("body %q, README shows %q", gb, wb))
	}
	return diffs
}

// headerValue returns the value of the header name in hs, "" if none.
func headerValue(hs [][2]string, name string) string {
	for _, h := range hs {
		if strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}

// compareJSON compares README's JSON value want with got: the same fields
// and array lengths everywhere, the same values but for readmeClockFields,
// which need only the same type.
func compareJSON(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v, README shows an object", path, got)}
		}
		var diffs []string
		for k := range g {
			if _, ok := w[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the answer, not in README", path, k))
			}
		}
		for k, wv := range w {
			gv, ok := g[k]
			switch {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s.%s: in README, not in the answer", path, k))
			case slices.Contains(readmeClockFields, k):
				if fmt.Sprintf("%T", wv) != fmt.Sprintf("%T", gv) {
					diffs = append(diffs, fmt.Sprintf("%s.%s: %v, README shows %v", path, k, gv, wv))
				}
			default:
				diffs = append(diffs, compareJSON(path+"."+k, wv, gv)...)
			}
		}
		slices.Sort(diffs)
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %v, README shows %v", path, got, want)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, compareJSON(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	default:
		if want != got {
			return []string{fmt.Sprintf("%s: %v, README shows %v", path, got, want)}
		}
		return nil
	}
}
