package main

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
	kArray // of objects described by elem
)

// jsonField describes one field of a request body, for error reports.
type jsonField struct {
	name string
	kind jsonKind
	elem []jsonField
}

var kindNames = [...]string{kString: "a string", kNumber: "a number", kBool: "true or false", kArray: "a list"}

// decodeStrict decodes the JSON object in data into v: unknown fields,
// wrong types and data after the object are errors. The error names the
// field at fault, found by walking data against schema (the slow path, only
// for bad bodies). rd, when not nil, is a reader to reuse.
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
		return nil
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

// locate walks the JSON object in data against schema and returns the
// first field that encoding/json would reject, with its path, or nil.
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
		i := -1
		for j, f := range schema {
			if f.name == k || (i < 0 && strings.EqualFold(f.name, k)) {
				i = j
			}
		}
		if i < 0 {
			p := joinJSON(path, k)
			names := make([]string, len(schema))
			for j, f := range schema {
				names[j] = f.name
			}
			return invalid(p, fmt.Sprintf("%s: unknown field (known: %s)", p, strings.Join(names, ", ")))
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
