package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// bodyPool recycles request body buffers: the hot path reads each body into
// one without allocating.
var bodyPool = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 1024)) }}

// readBody reads r's body, at most limit bytes, into a pooled buffer; the
// caller returns it with putBody.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (*bytes.Buffer, *problem) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	body := r.Body
	if r.ContentLength < 0 {
		// No declared length (chunked): stop reading past the limit. With
		// one, the server's body reader ends at it.
		body = http.MaxBytesReader(w, r.Body, limit)
	}
	_, err := buf.ReadFrom(body)
	if err == nil && int64(buf.Len()) > limit {
		err = &http.MaxBytesError{Limit: limit}
	}
	if err != nil {
		putBody(buf)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, invalid("body", "the body could not be read: "+err.Error())
	}
	return buf, nil
}

func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= 64<<10 {
		bodyPool.Put(buf)
	}
}

// jsonKind is the JSON type a field must have.
type jsonKind uint8

const (
	kString jsonKind = iota
	kNumber
	kBool
	kArray  // of objects described by elem
	kObject // an object described by elem
	kAny    // any value, not described further (checked by the decoder)
)

// jsonField describes one field of a request body: its spelling, the
// kind of its value, and the fields of the objects it holds. The key
// check (checkKeys) and the error reports (locate) walk bodies against it.
type jsonField struct {
	name string // the spelling
	alt  string // another spelling of the same field, or "" (protobuf JSON takes the proto name too)
	kind jsonKind
	elem []jsonField // kArray, kObject
}

// maxSchemaFields bounds the fields of one object of a schema: checkKeys
// marks the fields it has seen in a uint64.
const maxSchemaFields = 64

var kindNames = [...]string{kString: "a string", kNumber: "a number", kBool: "true or false", kArray: "a list", kObject: "a JSON object", kAny: "a JSON value"}

// decodeStrict decodes the JSON object in data into v. Errors: a field
// not spelled exactly as one of schema (unknown, or known in another
// case: encoding/json would match it case-insensitively), a field given
// twice (encoding/json would keep the last), wrong types, and data after
// the object. The error names the field at fault. On a valid body, the
// only work besides decoding is checkKeys, one pass over the bytes that
// does not allocate. rd, when not nil, is a reader to reuse.
func decodeStrict(data []byte, rd *bytes.Reader, v any, schema []jsonField) *problem {
	if rd == nil {
		rd = new(bytes.Reader)
	}
	rd.Reset(data)
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		off := dec.InputOffset()
		rest := data[off:]
		if trimmed := bytes.TrimLeft(rest, " \t\r\n"); len(trimmed) > 0 {
			return invalid("body", fmt.Sprintf("unexpected data after the JSON object at byte %d", off+int64(len(rest)-len(trimmed))))
		}
		p, _ := checkKeys(data[:off], schema)
		return p
	}
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return invalid("body", "the body is empty: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "malformed JSON: the body ends inside a value")
	case errors.As(err, &se):
		return invalid("body", fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: ")))
	}
	// The decoder read the whole value before it failed: data begins with
	// valid JSON. Report its first misspelled or repeated field, else the
	// field of wrong type.
	if p, _ := checkKeys(data, schema); p != nil {
		return p
	}
	if p := locate(data, schema); p != nil {
		return p
	}
	// Not expected: locate finds every error the decoder reports.
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return invalid(te.Field, fmt.Sprintf("%s: must not be a JSON %s", te.Field, te.Value))
	}
	return invalid("body", strings.TrimPrefix(err.Error(), "json: "))
}

// checkKeys walks the JSON value at the start of data against schema and
// returns the first field, in the order of the body, that is not exactly
// one of the schema's spellings (unknown, or known in another case) or
// that an object gives twice (under either spelling), or nil. Values
// schema does not describe are skipped. ok is false when data is not JSON
// it can walk; then the decoder's own error is the one to report. It
// allocates only to report an error, or to read a field name written with
// escapes.
func checkKeys(data []byte, schema []jsonField) (p *problem, ok bool) {
	s := keyScan{data: data}
	s.ws()
	if s.i >= len(s.data) || s.data[s.i] != '{' {
		return nil, s.i < len(s.data) // not an object: for the decoder
	}
	return s.object(schema)
}

// keyScan is checkKeys's reader: data, the offset read up to, and the
// path to the object being read (for reports), kept in an array so that
// walking allocates nothing.
type keyScan struct {
	data  []byte
	i     int
	path  [maxScanDepth]scanStep
	depth int
}

// maxScanDepth bounds the nesting of objects checkKeys checks; deeper
// ones are skipped. The schemas nest less deeply (TestSchemas).
const maxScanDepth = 8

// scanStep is one step of a path: the field holding an object, with the
// index of the object when it is an element of the field's list (else -1).
type scanStep struct {
	name  string
	index int
}

// field spells the path of field name of the object being read, as
// problems name fields: limits[0].window.
func (s *keyScan) field(name string) string {
	var at string
	for _, st := range s.path[:s.depth] {
		at = joinJSON(at, st.name)
		if st.index >= 0 {
			at += "[" + strconv.Itoa(st.index) + "]"
		}
	}
	return joinJSON(at, name)
}

func (s *keyScan) ws() {
	for s.i < len(s.data) && s.data[s.i] <= ' ' {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// object reads the object at s.i (which is '{') against schema.
func (s *keyScan) object(schema []jsonField) (*problem, bool) {
	s.i++ // {
	s.ws()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return nil, true
	}
	var seen uint64 // the schema's fields read so far
	for {
		if p, ok := s.member(schema, &seen); p != nil || !ok {
			return p, ok
		}
		if more, ok := s.sep('}'); !more {
			return nil, ok
		}
	}
}

// member reads one member of an object, name and value, against schema:
// the name must be one of its fields' and not in seen.
func (s *keyScan) member(schema []jsonField, seen *uint64) (*problem, bool) {
	s.ws()
	key, ok := s.name()
	if !ok || !s.colon() {
		return nil, false
	}
	j := fieldIndex(schema, key)
	if j < 0 {
		return s.misspelled(key, schema), true
	}
	f := &schema[j]
	if j < maxSchemaFields {
		if *seen&(1<<j) != 0 {
			return s.repeated(f), true
		}
		*seen |= 1 << j
	}
	return s.value(f)
}

// colon reads the ':' between a member's name and its value.
func (s *keyScan) colon() bool {
	s.ws()
	if s.i >= len(s.data) || s.data[s.i] != ':' {
		return false
	}
	s.i++
	s.ws()
	return true
}

// fieldIndex returns the index of the field of schema spelled key, or -1.
func fieldIndex(schema []jsonField, key []byte) int {
	for k := range schema {
		if f := &schema[k]; string(key) == f.name || (f.alt != "" && string(key) == f.alt) {
			return k
		}
	}
	return -1
}

// value reads the value at s.i of field f: the objects it holds are read
// against f.elem (down to maxScanDepth), anything else is skipped.
func (s *keyScan) value(f *jsonField) (*problem, bool) {
	switch {
	case s.i >= len(s.data):
		return nil, false
	case s.depth == maxScanDepth:
		return nil, s.skip()
	case f.kind == kArray && f.elem != nil && s.data[s.i] == '[':
		return s.list(f)
	case f.kind == kObject && f.elem != nil && s.data[s.i] == '{':
		return s.nested(scanStep{name: f.name, index: -1}, f.elem)
	}
	return nil, s.skip()
}

// nested reads the object at s.i, reached by step, against schema.
func (s *keyScan) nested(step scanStep, schema []jsonField) (*problem, bool) {
	s.path[s.depth] = step
	s.depth++
	p, ok := s.object(schema)
	s.depth--
	return p, ok
}

// sep reads what follows a member of an object or an element of a list:
// ',' (more follow) or end, the closing bracket; ok is false for anything
// else.
func (s *keyScan) sep(end byte) (more, ok bool) {
	s.ws()
	if s.i >= len(s.data) {
		return false, false
	}
	switch s.data[s.i] {
	case ',':
		s.i++
		return true, true
	case end:
		s.i++
		return false, true
	}
	return false, false
}

// list reads the list at s.i (which is '['), the value of f: its objects
// against f.elem.
func (s *keyScan) list(f *jsonField) (*problem, bool) {
	s.i++ // [
	s.ws()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		return nil, true
	}
	for idx := 0; ; idx++ {
		s.ws()
		if s.i >= len(s.data) {
			return nil, false
		}
		var (
			p  *problem
			ok bool
		)
		if s.data[s.i] == '{' {
			p, ok = s.nested(scanStep{name: f.name, index: idx}, f.elem)
		} else {
			ok = s.skip()
		}
		if p != nil || !ok {
			return p, ok
		}
		if more, ok := s.sep(']'); !more {
			return nil, ok
		}
	}
}

// name reads the string at s.i, a field name, and returns it as
// encoding/json reads it (escapes undone, invalid UTF-8 replaced). Without
// escapes, the result is a slice of data.
func (s *keyScan) name() ([]byte, bool) {
	start := s.i
	ok, ascii := s.str()
	if !ok {
		return nil, false
	}
	raw := s.data[start+1 : s.i-1]
	if ascii || bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw, true
	}
	var name string
	if json.Unmarshal(s.data[start:s.i], &name) != nil {
		return nil, false
	}
	return []byte(name), true
}

// str skips the string at s.i; ascii tells that it holds only ASCII and
// no escape.
func (s *keyScan) str() (ok, ascii bool) {
	if s.i >= len(s.data) || s.data[s.i] != '"' {
		return false, false
	}
	ascii = true
	for s.i++; ; {
		for s.i < len(s.data) && plainByte[s.data[s.i]] {
			s.i++
		}
		if s.i >= len(s.data) {
			return false, false
		}
		switch s.data[s.i] {
		case '"':
			s.i++
			return true, ascii
		case '\\':
			s.i += 2
		default:
			s.i++
		}
		ascii = false
	}
}

// plainByte marks the bytes that neither end a string nor start an
// escape and are ASCII; scalarByte those that may be part of a number,
// true, false or null.
var plainByte, scalarByte = func() (plain, scalar [256]bool) {
	for c := range utf8.RuneSelf {
		plain[c] = c != '"' && c != '\\'
	}
	for _, c := range "0123456789+-.eEtruefalsn" {
		scalar[c] = true
	}
	return plain, scalar
}()

// skip skips the value at s.i, whatever it holds.
func (s *keyScan) skip() bool {
	if s.i >= len(s.data) {
		return false
	}
	switch s.data[s.i] {
	case '"':
		ok, _ := s.str()
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case '"':
				if ok, _ := s.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	}
	start := s.i // a number, true, false or null
	for s.i < len(s.data) && scalarByte[s.data[s.i]] {
		s.i++
	}
	return s.i > start
}

// misspelled reports field key of the object being read, which is not
// one of schema's spellings: known in another case, or unknown.
func (s *keyScan) misspelled(key []byte, schema []jsonField) *problem {
	p := s.field(string(key))
	for _, f := range schema {
		for _, name := range []string{f.name, f.alt} {
			if name != "" && bytes.EqualFold(key, []byte(name)) {
				return invalid(p, fmt.Sprintf("%s: unknown field: field names are case-sensitive: did you mean %q?", p, name))
			}
		}
	}
	return unknownField(p, schema)
}

func unknownField(p string, schema []jsonField) *problem {
	names := make([]string, len(schema))
	for j, f := range schema {
		names[j] = f.name
	}
	return invalid(p, fmt.Sprintf("%s: unknown field (known: %s)", p, strings.Join(names, ", ")))
}

// repeated reports field f given twice in the object being read.
func (s *keyScan) repeated(f *jsonField) *problem {
	p := s.field(f.name)
	detail := p + ": given more than once: a field may appear once"
	if f.alt != "" {
		detail = fmt.Sprintf("%s: given more than once (as %s or %s): a field may appear once", p, f.name, f.alt)
	}
	return invalid(p, detail)
}

// locate walks the JSON object in data, whose fields checkKeys found
// spelled right and given once, against schema and returns the first
// field of a type encoding/json would reject, with its path, or nil.
func locate(data []byte, schema []jsonField) *problem {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return invalid("body", "malformed JSON")
	}
	if v == nil {
		return nil
	}
	return locateObject(v, "", schema)
}

func locateObject(v any, path string, schema []jsonField) *problem {
	obj, ok := v.(map[string]any)
	if !ok {
		if path == "" {
			return invalid("body", "the body must be a JSON object")
		}
		return invalid(path, path+": must be a JSON object")
	}
	for _, k := range sortedKeys(obj) {
		i := slices.IndexFunc(schema, func(f jsonField) bool { return f.name == k || f.alt != "" && f.alt == k })
		if i < 0 {
			return unknownField(joinJSON(path, k), schema)
		}
		if pr := locateValue(obj[k], joinJSON(path, schema[i].name), schema[i]); pr != nil {
			return pr
		}
	}
	return nil
}

// locateValue checks the value of field f at path p; null leaves the field
// unset.
func locateValue(val any, p string, f jsonField) *problem {
	if val == nil {
		return nil
	}
	var ok bool
	switch f.kind {
	case kString:
		_, ok = val.(string)
	case kBool:
		_, ok = val.(bool)
	case kNumber:
		n, isNum := val.(json.Number)
		if !isNum {
			return invalid(p, p+": must be a number")
		}
		if x, err := strconv.ParseFloat(string(n), 64); err != nil || math.IsInf(x, 0) {
			return invalidValue(p, string(n), "must be a finite number")
		}
		ok = true
	case kArray:
		var arr []any
		if arr, ok = val.([]any); ok {
			for j, e := range arr {
				if pr := locateObject(e, fmt.Sprintf("%s[%d]", p, j), f.elem); pr != nil {
					return pr
				}
			}
		}
	case kObject:
		return locateObject(val, p, f.elem)
	case kAny:
		ok = true
	}
	if !ok {
		return invalid(p, p+": must be "+kindNames[f.kind])
	}
	return nil
}

// joinJSON names a field: path.name, with odd names quoted.
func joinJSON(path, name string) string {
	plain := name != ""
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			plain = false
			break
		}
	}
	if !plain {
		name = strconv.Quote(name)
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

// sortedKeys makes reports deterministic.
func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// optNumber is a JSON number that may be absent: set tells. null leaves
// it unset, like any field. Anything but a finite number is an error
// (locate then names the field).
type optNumber struct {
	v   float64
	set bool
}

// UnmarshalJSON reads a number.
func (n *optNumber) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64) // a JSON value: NaN, Inf, hex or a string fail
	if err != nil || math.IsInf(v, 0) {
		return errors.New("must be a finite number")
	}
	*n = optNumber{v: v, set: true}
	return nil
}

// appendFloat appends v as a JSON number (integers without a fraction).
func appendFloat(buf []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(buf, '0')
	}
	return strconv.AppendFloat(buf, v, 'f', -1, 64)
}
