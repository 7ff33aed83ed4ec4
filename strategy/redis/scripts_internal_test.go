package redis

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The scripts sent are the prelude followed by each body, nothing else:
// the lane logic lives in lane.lua only.
func TestScriptsArePreludeAndBody(t *testing.T) {
	for _, c := range []struct {
		sc   *script
		body string
	}{{pushScript, pushBody}, {checkScript, checkBody}} {
		if c.sc.src != laneSource+c.body {
			t.Errorf("%s: the script sent is not lane.lua followed by its body", c.sc.name)
		}
		if lines := luaCode(c.body); len(lines) == 0 || !endsWithRun.MatchString(lines[len(lines)-1]) {
			t.Errorf("%s: the body does not end with `return run(group)` (or `return run(group, first)`)", c.sc.name)
		}
		if !strings.HasPrefix(c.body, "-- "+c.sc.name+":") {
			t.Errorf("%s: the body does not start with its own header comment", c.sc.name)
		}
	}
	if !strings.HasSuffix(laneSource, "\n") {
		t.Error("lane.lua does not end with a newline: its last line would run into the body's first")
	}
	for _, l := range strings.Split(laneSource, "\n") {
		if strings.HasPrefix(l, "return") {
			t.Errorf("lane.lua returns at its top level (%q): the body would never run", l)
		}
	}
}

// No body declares again, or shadows, a name the prelude declares at its
// top level: a body that did would run its own copy of the lane logic, or
// silently hide the prelude's from the code after it.
func TestBodiesDoNotRedefinePrelude(t *testing.T) {
	prelude := map[string]bool{}
	for _, l := range strings.Split(laneSource, "\n") {
		if !strings.HasPrefix(l, "local ") {
			continue // top level only: not indented
		}
		for _, name := range declared(l) {
			prelude[name] = true
		}
	}
	for _, want := range []string{"above", "exact", "incr", "expire", "fault", "run", "kb", "apply", "out", "o", "N",
		"K", "keyed"} {
		if !prelude[want] {
			t.Fatalf("lane.lua declares no %q at its top level: the test parses it wrong", want)
		}
	}
	for _, sc := range []*script{pushScript, checkScript} {
		body := strings.TrimPrefix(sc.src, laneSource)
		for i, l := range strings.Split(body, "\n") {
			l = strings.TrimSpace(stripComment(l))
			for _, name := range declared(l) {
				if prelude[name] {
					t.Errorf("%s:%d: declares %q, which lane.lua declares: %q", sc.name, i+1, name, l)
				}
			}
			if m := assignedFunction.FindStringSubmatch(l); m != nil && prelude[m[1]+m[2]] {
				t.Errorf("%s:%d: assigns a new function to %q, which lane.lua declares: %q", sc.name, i+1, m[1]+m[2], l)
			}
		}
	}
}

// The two bodies share no function and no run of code: what both need
// belongs in lane.lua.
func TestBodiesShareNoCode(t *testing.T) {
	push, check := luaFunctions(pushBody), luaFunctions(checkBody)
	if len(push) == 0 || len(check) == 0 {
		t.Fatalf("found %d functions in push.lua and %d in check.lua: want the group function of each at least", len(push), len(check))
	}
	for name, body := range push {
		for cname, cbody := range check {
			if body == cbody {
				t.Errorf("function %s of push.lua and %s of check.lua are the same: move it to lane.lua", name, cname)
			}
		}
	}

	// Runs of lines: sharedRun lines of code in a row (not counting lone
	// `end`s and `else`s) are a copy, not a coincidence. The longest run
	// the bodies share today is 3 lines.
	const sharedRun = 5
	a, b := substantive(luaCode(pushBody)), substantive(luaCode(checkBody))
	for i := range a {
		for j := range b {
			k := 0
			for i+k < len(a) && j+k < len(b) && a[i+k] == b[j+k] {
				k++
			}
			if k >= sharedRun {
				t.Errorf("push.lua and check.lua share %d lines of code in a row: move them to lane.lua:\n%s", k, strings.Join(a[i:i+k], "\n"))
				return
			}
		}
	}
}

// The helpers below read the scripts' Lua as it is written here (two-space
// indent, `end` of a function at the indent of its start, no `--` inside
// strings, no long strings or comments); they are not a Lua parser.

var (
	endsWithRun      = regexp.MustCompile(`^return run\(group(, \w+)?\)$`)
	localDecl        = regexp.MustCompile(`^local\s+(function\s+)?([\w\s,]+?)\s*(=|\(|$)`)
	assignedFunction = regexp.MustCompile(`^(?:(\w+)\s*=\s*function|function\s+(\w+))\b`)
	functionStart    = regexp.MustCompile(`^(\s*)(?:local\s+function\s+(\w+)|(\w+)\s*=\s*function|function\s+(\w+))\b`)
)

// declared returns the names a line of code declares as locals.
func declared(line string) []string {
	m := localDecl.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return nil
	}
	var names []string
	for _, n := range strings.Split(m[2], ",") {
		names = append(names, strings.TrimSpace(n))
	}
	return names
}

func stripComment(line string) string {
	if i := strings.Index(line, "--"); i >= 0 {
		return line[:i]
	}
	return line
}

// luaCode returns the lines of code of src, trimmed, without comments and
// blank lines.
func luaCode(src string) []string {
	var out []string
	for _, l := range strings.Split(src, "\n") {
		if l = strings.TrimSpace(stripComment(l)); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func substantive(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l != "end" && l != "else" {
			out = append(out, l)
		}
	}
	return out
}

// luaFunctions returns the named functions of src (local function f,
// f = function, or function f), each as its lines of code from its start to its end.
func luaFunctions(src string) map[string]string {
	lines := strings.Split(src, "\n")
	fns := make(map[string]string)
	for i, l := range lines {
		m := functionStart.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := m[2] + m[3] + m[4]
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], m[1]+"end") {
				fns[fmt.Sprintf("%s (line %d)", name, i+1)] = strings.Join(luaCode(strings.Join(lines[i+1:j], "\n")), "\n")
				break
			}
		}
	}
	return fns
}
