package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// walker decodes a YAML document node by node, so that every error names
// the file, the line and the field: "node.yaml:12: policies[0].limits[1].window:
// "abc": must be a duration like 1s, 1m, 1h". It collects errors instead of
// stopping at the first.
type walker struct {
	file string
	errs []error
}

// field is one known key of a mapping and what to do with its value.
type field struct {
	name string
	set  func(v *yaml.Node, path string)
}

func (w *walker) fail(n *yaml.Node, path, msg string) {
	w.errs = append(w.errs, fmt.Errorf("%s:%d: %s: %s", w.file, n.Line, path, msg))
}

// failValue reports a bad value, quoting it.
func (w *walker) failValue(n *yaml.Node, path, msg string) {
	w.fail(n, path, strconv.Quote(n.Value)+": "+msg)
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// mapping calls the setter of each key of the mapping n; unknown and
// repeated keys are errors. A null node is an empty mapping.
func (w *walker) mapping(n *yaml.Node, path string, fields ...field) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		w.fail(n, pathOr(path), "must be a mapping of key: value")
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		p := join(path, k.Value)
		if seen[k.Value] {
			w.fail(k, p, "repeated field")
			continue
		}
		seen[k.Value] = true
		j := slices.IndexFunc(fields, func(f field) bool { return f.name == k.Value })
		if j < 0 {
			names := make([]string, len(fields))
			for i, f := range fields {
				names[i] = f.name
			}
			slices.Sort(names)
			w.fail(k, p, "unknown field (known: "+strings.Join(names, ", ")+")")
			continue
		}
		fields[j].set(resolve(v), p)
	}
}

func pathOr(path string) string {
	if path == "" {
		return "(top level)"
	}
	return path
}

// sequence calls each for every item of the sequence n. A null node is an
// empty sequence.
func (w *walker) sequence(n *yaml.Node, path string, each func(i int, item *yaml.Node, path string)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		w.fail(n, path, "must be a list")
		return
	}
	for i, item := range n.Content {
		each(i, resolve(item), fmt.Sprintf("%s[%d]", path, i))
	}
}

// scalar reports whether n is a scalar, failing otherwise.
func (w *walker) scalar(n *yaml.Node, path string) bool {
	if n.Kind != yaml.ScalarNode {
		w.fail(n, path, "must be a single value, not a list or a mapping")
		return false
	}
	return true
}

// str returns the scalar's text; null is "".
func (w *walker) str(n *yaml.Node, path string) string {
	if !w.scalar(n, path) || isNull(n) {
		return ""
	}
	return n.Value
}

// strs returns a list of strings; a single scalar is a list of one.
func (w *walker) strs(n *yaml.Node, path string) []string {
	if n.Kind == yaml.ScalarNode {
		if isNull(n) {
			return nil
		}
		return []string{n.Value}
	}
	var out []string
	w.sequence(n, path, func(_ int, item *yaml.Node, p string) {
		if w.scalar(item, p) {
			out = append(out, item.Value)
		}
	})
	return out
}

func (w *walker) boolean(n *yaml.Node, path string) bool {
	if !w.scalar(n, path) || isNull(n) {
		return false
	}
	var b bool
	if n.Tag != "!!bool" || n.Decode(&b) != nil {
		w.failValue(n, path, "must be true or false")
	}
	return b
}

// integer returns a whole number at least least.
func (w *walker) integer(n *yaml.Node, path string, least int64) int64 {
	if !w.scalar(n, path) || isNull(n) {
		return 0
	}
	var v int64
	if n.Tag != "!!int" || n.Decode(&v) != nil {
		w.failValue(n, path, "must be a whole number")
		return 0
	}
	if v < least {
		w.failValue(n, path, fmt.Sprintf("must be at least %d", least))
		return 0
	}
	return v
}

// number returns a finite number > 0 and at most maxNumber.
func (w *walker) number(n *yaml.Node, path string) float64 {
	if !w.scalar(n, path) || isNull(n) {
		return 0
	}
	var v float64
	if (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		w.failValue(n, path, "must be a number")
		return 0
	}
	if v <= 0 || v > maxNumber {
		w.failValue(n, path, fmt.Sprintf("must be > 0 and at most %g", float64(maxNumber)))
		return 0
	}
	return v
}

// duration returns a Go duration ("1s", "1m", "1h", "500ms"; "0" for zero).
func (w *walker) duration(n *yaml.Node, path string) (Duration, bool) {
	if !w.scalar(n, path) || isNull(n) {
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		w.failValue(n, path, "must be a duration like 1s, 1m, 1h")
		return 0, false
	}
	return Duration(d), true
}

// oneOf returns the scalar's text when it is one of allowed.
func (w *walker) oneOf(n *yaml.Node, path string, allowed ...string) string {
	s := w.str(n, path)
	if s != "" && !slices.Contains(allowed, s) {
		w.failValue(n, path, "must be one of "+strings.Join(allowed, ", "))
		return ""
	}
	return s
}
