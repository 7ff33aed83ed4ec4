package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// source is a config file being read: its name and the YAML node of each
// field it sets, by path ("namespaces[0].redis.shards"), so that an error
// about a field, found while decoding or by a rule of a library package,
// names the field's own line: "node.yaml:12: policies[0].limits[1].window:
// "abc": must be a duration like 1s, 1m, 1h". Errors are collected, not
// returned at the first.
type source struct {
	file     string
	nodes    map[string]*yaml.Node
	errs     []lineError
	reported map[string]bool // paths with an error
	invalid  map[string]bool // paths of the wrong shape (walk's errors): their values were not read
	unsure   map[string]bool // namespaces with an invalid field: what depends on them is not checked
	lines    map[string]int  // of each field: its key's line, or a list item's own
	visited  int             // values walked, aliases expanded
	stopped  bool            // walk gave up: too many values or errors
}

// lineError is an error about the file's line.
type lineError struct {
	line int
	err  error
}

// err returns the errors found, joined, in the order of their lines (the
// shape's and the rules' of one line in the order found); nil if none.
func (s *source) err() error {
	slices.SortStableFunc(s.errs, func(a, b lineError) int { return cmp.Compare(a.line, b.line) })
	errs := make([]error, len(s.errs))
	for i, e := range s.errs {
		errs[i] = e.err
	}
	return errors.Join(errs...)
}

// Bounds of walk: a file whose aliases expand to more values than
// maxValues is refused (an alias bomb), and walking stops after maxErrors
// errors.
const (
	maxValues = 100_000
	maxErrors = 100
)

func newSource(file string) *source {
	return &source{file: file, nodes: map[string]*yaml.Node{}, reported: map[string]bool{}, invalid: map[string]bool{}, unsure: map[string]bool{}, lines: map[string]int{}}
}

// decode parses data into cfg: YAML syntax first, then the shape of every
// field (known names, mappings, lists, scalars of the right kind, allowed
// values), then the YAML library decodes into the tagged structs, refusing
// unknown fields.
func (s *source) decode(data []byte, cfg *Config) error {
	var doc, next yaml.Node
	docs := yaml.NewDecoder(bytes.NewReader(data))
	if err := docs.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return s.syntaxError(data, err)
	}
	switch err := docs.Decode(&next); {
	case err == nil:
		return fmt.Errorf("%s:%d: a second YAML document: the file must hold one", s.file, next.Line)
	case !errors.Is(err, io.EOF):
		return s.syntaxError(data, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	s.walk(doc.Content[0], reflect.TypeFor[Config](), "", "")
	if s.stopped {
		return s.err()
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(cfg)
	var te *yaml.TypeError
	switch {
	case err == nil || errors.Is(err, io.EOF):
	case errors.As(err, &te) && len(s.errs) > 0:
		// walk reported the fields the decoder refused, which it left
		// empty; validation goes on without them (invalid).
	case len(s.errs) > 0:
		return s.err()
	default:
		return s.decodeError(err, doc.Content[0].Line) // not expected: walk finds what Decode refuses
	}
	return nil
}

var (
	yamlErrLineRE = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlValueRE   = regexp.MustCompile("`[^`]*`")
)

// decodeError reports an error of the YAML decoder with a line (its own,
// or line, the document's) and without the values it quotes: they may be
// secrets.
func (s *source) decodeError(err error, line int) error {
	msgs := []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	if te, ok := err.(*yaml.TypeError); ok {
		msgs = te.Errors
	}
	errs := make([]error, 0, len(msgs))
	for _, msg := range msgs {
		l := line
		if m := yamlErrLineRE.FindStringSubmatch(msg); m != nil {
			l, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		errs = append(errs, fmt.Errorf("%s:%d: %s", s.file, l, yamlValueRE.ReplaceAllString(msg, "a value")))
	}
	return errors.Join(errs...)
}

var yamlLineRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

// syntaxError names the line of a YAML syntax error. The parser's message
// names the line where the enclosing block or flow collection started (a
// bad indent on line 5 of a list item that starts on line 3 says "line 3"),
// so the line is found again (faultLine).
func (s *source) syntaxError(data []byte, err error) error {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%s: invalid YAML: %w", s.file, err)
	}
	line, _ := strconv.Atoi(m[1])
	if len(data) <= maxFaultSearch {
		line = faultLine(data)
	}
	return fmt.Errorf("%s:%d: invalid YAML: %s", s.file, line, err.Error()[len(m[0]):])
}

// maxFaultSearch bounds the bytes faultLine re-parses: it parses the
// file O(log lines) times.
const maxFaultSearch = 256 << 10

// faultLook is how many lines faultLine looks past a prefix that does not
// parse for a longer one that does: a flow collection over several lines
// does not parse until it closes.
const faultLook = 20

// faultLine returns the line of the syntax error in data: the first line
// after the longest run of leading lines that parses, found by binary
// search.
func faultLine(data []byte) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	parses := func(k int) bool {
		var n yaml.Node
		return yaml.Unmarshal(bytes.Join(lines[:k], nil), &n) == nil
	}
	lo, end := 0, len(lines) // lines[:lo] parses; lines[:end] does not
	for {
		hi := end
		for lo+1 < hi { // lines[:hi] does not parse
			mid := lo + (hi-lo)/2
			if parses(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		next := 0
		for k := hi + 1; k < min(hi+faultLook, end); k++ {
			if parses(k) {
				next = k
				break
			}
		}
		if next == 0 {
			return hi
		}
		lo = next
	}
}

// set reports whether the file gives the field at path a value.
func (s *source) set(path string) bool {
	n := s.nodes[path]
	return n != nil && !isNull(n)
}

// line returns the line of the field at path, or of the nearest enclosing
// field the file has (0: none, as without a file).
func (s *source) line(path string) int {
	for path != "" {
		if l, ok := s.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// text returns the field's text in the file, or def when the file does not
// give it as a single value.
func (s *source) text(path, def string) string {
	if n := s.nodes[path]; n != nil && n.Kind == yaml.ScalarNode && !isNull(n) {
		return n.Value
	}
	return def
}

// isInvalid reports whether walk found the field at path, or one holding
// it, of the wrong shape.
func (s *source) isInvalid(path string) bool {
	for len(s.invalid) > 0 && path != "" {
		if s.invalid[path] {
			return true
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return false
}

// invalidWithin reports whether walk found a field at or under path of
// the wrong shape.
func (s *source) invalidWithin(path string) bool {
	for p := range s.invalid {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			return true
		}
	}
	return false
}

// namesUnread reports whether walk found the list at path ("namespaces",
// "policies"), one of its items, or an item's name of the wrong shape: a
// name the file may give was not read.
func (s *source) namesUnread(path string) bool {
	for p := range s.invalid {
		rest, ok := strings.CutPrefix(p, path)
		rest = strings.TrimSuffix(rest, ".name")
		if ok && (rest == "" || strings.HasPrefix(rest, "[") && strings.Count(rest, "[") == 1 && strings.HasSuffix(rest, "]")) {
			return true
		}
	}
	return false
}

// report records an error about the field at path: "file:line: path: msg".
func (s *source) report(path, msg string) { s.reportAs(path, path, msg) }

// reportAs records an error about the field at path, named label, unless
// the field, or one holding it, does not have the shape it must have: its
// value was not read, and the shape's error says why.
func (s *source) reportAs(path, label, msg string) {
	if s.isInvalid(path) {
		return
	}
	s.reported[path] = true
	if s.file == "" {
		s.errs = append(s.errs, lineError{0, fmt.Errorf("%s: %s", label, msg)})
		return
	}
	line := s.line(path)
	s.errs = append(s.errs, lineError{line, fmt.Errorf("%s:%d: %s: %s", s.file, line, label, msg)})
}

// reportValue records an error about the value of the field at path,
// quoting value: `file:line: path: "value": msg`.
func (s *source) reportValue(path, value, msg string) {
	s.report(path, strconv.Quote(value)+": "+msg)
}

// bad records an error about the value of the field at path: its text
// in the file, or def when the file does not give it.
func (s *source) bad(path, def, msg string) {
	s.reportValue(path, s.text(path, def), msg)
}

// fail records an error at node n: on the line of the field at path if
// walk has seen it (not the line of an alias's anchor), else on n's.
func (s *source) fail(n *yaml.Node, path, msg string) {
	line, ok := s.lines[path]
	if !ok {
		line = n.Line
	}
	s.failAt(line, path, msg)
}

// failAt records an error at line.
func (s *source) failAt(line int, path, msg string) {
	s.reported[path] = true
	s.invalid[path] = true
	s.errs = append(s.errs, lineError{line, fmt.Errorf("%s:%d: %s: %s", s.file, line, path, msg)})
}

func (s *source) failValue(n *yaml.Node, path, msg string) {
	s.fail(n, path, strconv.Quote(n.Value)+": "+msg)
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

var (
	durationType   = reflect.TypeFor[Duration]()
	stringListType = reflect.TypeFor[stringList]()
)

// walk checks that n has the shape of a value of type t and indexes it
// under path. oneOf lists the values a string (or each string of a list)
// may take. A null is an empty value of any type.
func (s *source) walk(n *yaml.Node, t reflect.Type, path, oneOf string) {
	if !s.count(n, path) {
		return
	}
	if _, ok := s.lines[path]; !ok {
		s.lines[path] = n.Line // a list item's: of the item, or of its alias
	}
	n = resolve(n)
	s.nodes[path] = n
	if isNull(n) {
		return
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		s.duration(n, path)
	case t.Kind() == reflect.Struct:
		s.mapping(n, t, path)
	case t == stringListType && n.Kind == yaml.ScalarNode:
		s.scalar(n, reflect.TypeFor[string](), path, oneOf)
	case t.Kind() == reflect.Slice:
		s.list(n, t, path, oneOf)
	default:
		s.scalar(n, t, path, oneOf)
	}
}

// count counts a value walked and reports whether walking goes on: it
// stops after maxValues values (aliases expanded) or maxErrors errors.
func (s *source) count(n *yaml.Node, path string) bool {
	if s.stopped {
		return false
	}
	s.visited++
	switch {
	case s.visited > maxValues:
		s.stopped = true
		s.fail(n, path, fmt.Sprintf("too many values: the file, aliases expanded, has more than %d", maxValues))
	case len(s.errs) >= maxErrors:
		s.stopped = true
		s.errs = append(s.errs, lineError{math.MaxInt, fmt.Errorf("%s: more than %d errors; stopped", s.file, maxErrors)})
	}
	return !s.stopped
}

// duration checks a duration.
func (s *source) duration(n *yaml.Node, path string) {
	if !s.tagFits(n, durationType, path) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		s.fail(n, path, errDuration.Error())
	} else if _, err := parseDuration(n.Value); err != nil {
		s.failValue(n, path, err.Error())
	}
}

// list checks a list of values of t's element type, none empty.
func (s *source) list(n *yaml.Node, t reflect.Type, path, oneOf string) {
	if n.Kind != yaml.SequenceNode {
		s.fail(n, path, "must be a list")
		return
	}
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		if isNull(resolve(item)) { // the decoder drops it: later items would move up
			s.fail(item, p, "must not be empty")
			continue
		}
		s.walk(item, t.Elem(), p, oneOf)
	}
}

// mapping checks a mapping against the yaml fields of struct type t:
// unknown and repeated keys are errors.
func (s *source) mapping(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.MappingNode {
		if path == "" {
			path = "(top level)"
		}
		s.fail(n, path, "must be a mapping of key: value")
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		p := join(path, k.Value)
		f, known := yamlField(t, k.Value)
		switch {
		case seen[k.Value]:
			s.failAt(k.Line, p, "repeated field")
		case !known:
			s.fail(k, p, "unknown field (known: "+strings.Join(yamlNames(t), ", ")+")")
		default:
			s.lines[p] = k.Line
			s.walk(n.Content[i+1], f.Type, p, f.Tag.Get("oneof"))
		}
		seen[k.Value] = true
	}
}

// yamlField returns the field of struct type t that the file names name.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); name != "" && yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlNames returns the names of the fields of struct type t, sorted.
func yamlNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// yamlName is the name of a struct field in the file; "" for none.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if !f.IsExported() || name == "-" {
		return ""
	}
	return name
}

// scalar checks a single value of type t.
func (s *source) scalar(n *yaml.Node, t reflect.Type, path, oneOf string) {
	if n.Kind != yaml.ScalarNode {
		s.fail(n, path, "must be a single value, not a list or a mapping")
		return
	}
	if !s.tagFits(n, t, path) {
		return
	}
	if msg := scalarError(n, t.Kind(), oneOf); msg != "" {
		s.failValue(n, path, msg)
	} else if n.Decode(reflect.New(t).Interface()) != nil {
		s.fail(n, path, "cannot be read as "+kindText(t)) // the value may be a secret
	}
}

// scalarError returns what is wrong with the single value n for a field
// of kind k, or "". oneOf lists the values a string may take.
func scalarError(n *yaml.Node, k reflect.Kind, oneOf string) string {
	switch k {
	case reflect.Bool:
		if n.Tag != "!!bool" {
			return "must be true or false"
		}
	case reflect.Int, reflect.Int64:
		var i int64
		if n.Tag != "!!int" || n.Decode(&i) != nil {
			return "must be a whole number"
		}
	case reflect.Float64:
		var f float64
		if n.Tag != "!!int" && n.Tag != "!!float" || n.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return "must be a number"
		}
	case reflect.String:
		if oneOf != "" && !slices.Contains(strings.Fields(oneOf), n.Value) {
			return "must be one of " + strings.ReplaceAll(oneOf, " ", ", ")
		}
	}
	return ""
}

// tagFits reports whether the explicit tag of n, if any, fits a value of
// type t; if not it records an error without the value (it may be a
// secret): "admin_token: !!int abc" is not a string.
func (s *source) tagFits(n *yaml.Node, t reflect.Type, path string) bool {
	if n.Style&yaml.TaggedStyle == 0 {
		return true
	}
	var fits []string
	switch {
	case t == durationType:
		fits = []string{"!!str", "!!int"}
	case t.Kind() == reflect.String:
		fits = []string{"!!str"}
	case t.Kind() == reflect.Bool:
		fits = []string{"!!bool"}
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		fits = []string{"!!int"}
	case t.Kind() == reflect.Float64:
		fits = []string{"!!int", "!!float"}
	}
	if slices.Contains(fits, n.Tag) {
		return true
	}
	s.fail(n, path, "the tag "+n.Tag+" does not fit: must be "+kindText(t))
	return false
}

// kindText says what a value of type t is in the file.
func kindText(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration like 1s, 1m, 1h"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return "a whole number"
	case t.Kind() == reflect.Float64:
		return "a number"
	}
	return "a string"
}
