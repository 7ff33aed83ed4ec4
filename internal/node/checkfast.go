package node

import (
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// fastCheck decodes the common /v1/check body into st.body without
// encoding/json: one pass over the bytes, no reflection, and no allocation
// but the key's string (and, the first few times, the namespace's, the
// policy's and the limits' strings, which st then keeps). It takes what
// decodeStrict takes and decodes it the same way, but only for bodies in
// a plain subset of JSON: every field of checkSchema at most once,
// spelled exactly, none null; strings without escapes and in valid UTF-8;
// numbers that strconv.ParseFloat takes in range. On anything else
// (including every invalid body) it returns false, and the caller
// decodes with decodeStrict, whose errors name the field at fault: the
// decoders agree on every body fastCheck takes (FuzzFastCheck).
func fastCheck(data []byte, st *checkState) bool {
	p := fastParser{data: data, st: st}
	b := &st.body
	if !p.object(func(name []byte) bool {
		switch string(name) {
		case "namespace":
			return p.str(&b.Namespace, true)
		case "policy":
			return p.str(&b.Policy, true)
		case "key":
			return p.str(&b.Key, false)
		case "cost":
			return p.number(&b.Cost)
		case "penalty":
			return p.boolean(&b.Penalty)
		case "limits":
			return p.limits(b)
		}
		return false
	}) {
		return false
	}
	p.ws()
	return p.i == len(p.data)
}

// fastParser is fastCheck's cursor over the body.
type fastParser struct {
	data []byte
	i    int
	st   *checkState
}

func (p *fastParser) ws() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips white space and consumes c, reporting whether it was there.
func (p *fastParser) next(c byte) bool {
	p.ws()
	if p.i < len(p.data) && p.data[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads an object whose fields field reads (false: give up), each
// name at most once; field refuses names not in the schema, so an object
// holds at most as many as seen has room for.
func (p *fastParser) object(field func(name []byte) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	var seen [8][]byte
	n := 0
	for {
		p.ws()
		name, ok := p.raw()
		if !ok || n == len(seen) {
			return false
		}
		for _, s := range seen[:n] {
			if string(s) == string(name) {
				return false // twice: decodeStrict names it
			}
		}
		seen[n] = name
		n++
		if !p.next(':') {
			return false
		}
		p.ws()
		if !field(name) {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next('}')
	}
}

// raw reads a string without escapes, in valid UTF-8, and returns its
// bytes (what encoding/json decodes it to).
func (p *fastParser) raw() ([]byte, bool) {
	if p.i >= len(p.data) || p.data[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	ascii := true
	for j := start; j < len(p.data); j++ {
		switch c := p.data[j]; {
		case c == '"':
			s := p.data[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, false // encoding/json replaces bad bytes
			}
			p.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// str reads a string into dst; interned strings come from st's table of
// recent names (namespaces, policies, windows, types), which saves their
// allocation.
func (p *fastParser) str(dst *string, interned bool) bool {
	s, ok := p.raw()
	if !ok {
		return false
	}
	if interned {
		*dst = p.st.intern(s)
	} else {
		*dst = string(s)
	}
	return true
}

// number reads a JSON number as encoding/json decodes it into a float64:
// strconv.ParseFloat of its text, which must be in range.
func (p *fastParser) number(dst *float64) bool {
	text, integer, ok := scanNumber(p.data, p.i)
	if !ok {
		return false
	}
	p.i += len(text)
	if integer && len(text) <= 15 {
		// Up to 15 digits: exact in a float64, as ParseFloat gives it.
		*dst = smallInteger(text)
		return true
	}
	// The string does not outlive the call: ParseFloat's error (which
	// would hold it) is dropped.
	v, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(text), len(text)), 64)
	if err != nil {
		return false
	}
	*dst = v
	return true
}

// scanNumber returns the JSON number at d[i:], and whether it is an
// integer (no fraction, no exponent): a sign, an integer part, a
// fraction, an exponent.
func scanNumber(d []byte, i int) (text []byte, integer, ok bool) {
	j := i
	if j < len(d) && d[j] == '-' {
		j++
	}
	if j, ok = integerPart(d, j); !ok {
		return nil, false, false
	}
	end := j
	if j, ok = fraction(d, j); !ok {
		return nil, false, false
	}
	if j, ok = exponent(d, j); !ok {
		return nil, false, false
	}
	return d[i:j], j == end, true
}

// digits returns the end of the run of digits at d[j:].
func digits(d []byte, j int) int {
	for j < len(d) && d[j] >= '0' && d[j] <= '9' {
		j++
	}
	return j
}

// integerPart reads 0, or digits not starting with 0.
func integerPart(d []byte, j int) (int, bool) {
	switch {
	case j < len(d) && d[j] == '0':
		return j + 1, true
	case j < len(d) && d[j] >= '1' && d[j] <= '9':
		return digits(d, j), true
	}
	return j, false
}

// fraction reads '.' and at least one digit, if there.
func fraction(d []byte, j int) (int, bool) {
	if j >= len(d) || d[j] != '.' {
		return j, true
	}
	k := digits(d, j+1)
	return k, k > j+1
}

// exponent reads 'e' or 'E', a sign, and at least one digit, if there.
func exponent(d []byte, j int) (int, bool) {
	if j >= len(d) || (d[j] != 'e' && d[j] != 'E') {
		return j, true
	}
	j++
	if j < len(d) && (d[j] == '+' || d[j] == '-') {
		j++
	}
	k := digits(d, j)
	return k, k > j
}

// smallInteger returns the value of text, an integer of at most 15
// digits and a sign.
func smallInteger(text []byte) float64 {
	v, neg := 0.0, false
	for _, c := range text {
		if c == '-' {
			neg = true
			continue
		}
		v = v*10 + float64(c-'0')
	}
	if neg {
		v = -v
	}
	return v
}

func (p *fastParser) boolean(dst *bool) bool {
	switch d := p.data[p.i:]; {
	case len(d) >= 4 && string(d[:4]) == "true":
		*dst, p.i = true, p.i+4
	case len(d) >= 5 && string(d[:5]) == "false":
		*dst, p.i = false, p.i+5
	default:
		return false
	}
	return true
}

// limits reads the list of limits into b.Limits, reusing its elements.
func (p *fastParser) limits(b *checkBody) bool {
	if !p.next('[') {
		return false
	}
	b.Limits = b.Limits[:0]
	if p.next(']') {
		return true
	}
	for {
		p.ws()
		b.Limits = append(b.Limits, limitBody{})
		l := &b.Limits[len(b.Limits)-1]
		if !p.object(func(name []byte) bool {
			switch string(name) {
			case "limit":
				return p.number(&l.Limit)
			case "window":
				return p.str(&l.Window, true)
			case "type":
				return p.str(&l.Type, true)
			case "burst":
				l.Burst.set = true
				return p.number(&l.Burst.v)
			case "precision":
				return p.str(&l.Precision, true)
			}
			return false
		}) {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next(']')
	}
}

// intern returns s as a string, from st's table when it is there: the
// namespaces, policies, windows and types of a node's clients are few, so
// after the first requests they cost no allocation.
func (st *checkState) intern(s []byte) string {
	for _, name := range st.names {
		if name == string(s) {
			return name
		}
	}
	name := string(s)
	if len(s) <= maxInterned {
		st.names[st.nextName%len(st.names)] = name
		st.nextName++
	}
	return name
}

// maxInterned bounds the strings intern keeps: a name, not a key.
const maxInterned = 64
