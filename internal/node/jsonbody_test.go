package node

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// strictRLSConfig is a domain for the POST /json cases.
const strictRLSConfig = `
domain: shop
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// Every JSON endpoint refuses a field given twice, at any level, and a
// field that is a known one in another case (which encoding/json would
// take), with a 400 problem naming the field and, for a case mismatch, the
// spelling it should have.
func TestStrictBodies(t *testing.T) {
	n := newTestNode(t, "rls:\n  config: "+rlsFile(t, strictRLSConfig)+"\n", nil)
	const lim = `{"limit":100,"window":"1m"}`
	tests := []struct {
		name, path, body string
		wantStatus       int
		wantField        string
		wantDetail       []string
	}{
		// /v1/check
		{"check: valid", "/v1/check", `{"key":"k","limits":[` + lim + `]}`, 200, "", nil},
		{"check: key twice", "/v1/check", `{"key":"a","limits":[` + lim + `],"key":"b"}`, 400, "key", []string{"key: given more than once"}},
		{"check: key twice, once escaped", "/v1/check", `{"key":"a","k\u0065y":"b","limits":[` + lim + `]}`, 400, "key", []string{"key: given more than once"}},
		{"check: limits twice", "/v1/check", `{"key":"a","limits":[` + lim + `],"limits":[` + lim + `]}`, 400, "limits", []string{"limits: given more than once"}},
		{"check: KEY", "/v1/check", `{"KEY":"a","limits":[` + lim + `]}`, 400, "KEY", []string{"KEY: unknown field", "case-sensitive", `did you mean "key"?`}},
		{"check: Key beside key", "/v1/check", `{"key":"a","Key":"b","limits":[` + lim + `]}`, 400, "Key", []string{`did you mean "key"?`}},
		{"check: Kelvin sign", "/v1/check", `{"\u212aey":"a","limits":[` + lim + `]}`, 400, "\"\u212aey\"", []string{`did you mean "key"?`}},
		{"check: unknown field", "/v1/check", `{"key":"a","limits":[` + lim + `],"nope":1}`, 400, "nope", []string{"nope: unknown field (known: namespace, policy, key, cost, penalty, limits)"}},
		{"check: window twice in limits[1]", "/v1/check", `{"key":"a","limits":[` + lim + `,{"limit":1,"window":"1s","window":"1m"}]}`, 400, "limits[1].window", []string{"limits[1].window: given more than once"}},
		{"check: Window in limits[0]", "/v1/check", `{"key":"a","limits":[{"limit":1,"Window":"1s"}]}`, 400, "limits[0].Window", []string{"limits[0].Window: unknown field", `did you mean "window"?`}},
		{"check: LIMIT in limits[2]", "/v1/check", `{"key":"a","limits":[` + lim + `,` + lim + `,{"LIMIT":1,"window":"1s"}]}`, 400, "limits[2].LIMIT", []string{`did you mean "limit"?`}},
		{"check: same field in two limits", "/v1/check", `{"key":"a","limits":[` + lim + `,{"limit":10,"window":"1s"}]}`, 200, "", nil},
		{"check: case mismatch beside a type error", "/v1/check", `{"key":1,"Cost":2,"limits":[` + lim + `]}`, 400, "Cost", []string{`did you mean "cost"?`}},
		{"check: policy form, key twice", "/v1/check", `{"policy":"p","key":"a","key":"b"}`, 400, "key", []string{"given more than once"}},

		// /v1/increment
		{"increment: valid", "/v1/increment", `{"key":"k","window":"1m","value":2}`, 200, "", nil},
		{"increment: value twice", "/v1/increment", `{"key":"k","window":"1m","value":2,"value":3}`, 400, "value", []string{"value: given more than once"}},
		{"increment: VALUE", "/v1/increment", `{"key":"k","window":"1m","VALUE":2}`, 400, "VALUE", []string{`did you mean "value"?`}},
		{"increment: Window", "/v1/increment", `{"key":"k","Window":"1m"}`, 400, "Window", []string{`did you mean "window"?`}},

		// POST /json: protojson takes the JSON and the proto names, exactly.
		{"json: valid", "/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"api_key","value":"a"}]}],"hits_addend":1}`, 200, "", nil},
		{"json: domain twice", "/json", `{"domain":"shop","domain":"shop","descriptors":[{"entries":[{"key":"api_key","value":"a"}]}]}`, 400, "domain", []string{"domain: given more than once"}},
		{"json: hitsAddend under both names", "/json", `{"domain":"shop","hits_addend":1,"descriptors":[{"entries":[{"key":"api_key","value":"a"}]}],"hitsAddend":2}`, 400, "hitsAddend", []string{"given more than once (as hitsAddend or hits_addend)"}},
		{"json: Domain", "/json", `{"Domain":"shop","descriptors":[{"entries":[{"key":"api_key","value":"a"}]}]}`, 400, "Domain", []string{`did you mean "domain"?`}},
		{"json: key twice in an entry", "/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"api_key","value":"a","key":"x"}]}]}`, 400, "descriptors[0].entries[0].key", []string{"descriptors[0].entries[0].key: given more than once"}},
		{"json: Value in an entry", "/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"api_key","Value":"a"}]}]}`, 400, "descriptors[0].entries[0].Value", []string{`did you mean "value"?`}},
		{"json: REQUESTS_PER_UNIT in a limit", "/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"api_key","value":"a"}],"limit":{"REQUESTS_PER_UNIT":5,"unit":"MINUTE"}}]}`, 400, "descriptors[0].limit.REQUESTS_PER_UNIT", []string{`did you mean "requests_per_unit"?`}},
		{"json: requestsperunit in a limit", "/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"api_key","value":"a"}],"limit":{"requestsperunit":5,"unit":"MINUTE"}}]}`, 400, "descriptors[0].limit.requestsperunit", []string{`did you mean "requestsPerUnit"?`}},
		{"json: malformed", "/json", `{"domain":"shop",`, 400, "body", []string{"not a RateLimitRequest in protobuf JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(n.api, "POST", tt.path, tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantStatus < 400 {
				return
			}
			p := problemOfBody(t, w)
			if p.Field != tt.wantField {
				t.Errorf("field %q, want %q (detail %q)", p.Field, tt.wantField, p.Detail)
			}
			for _, s := range tt.wantDetail {
				if !strings.Contains(p.Detail, s) {
					t.Errorf("detail %q does not say %q", p.Detail, s)
				}
			}
		})
	}
}

func TestCheckKeys(t *testing.T) {
	schema := []jsonField{
		{name: "a", kind: kString},
		{name: "list", kind: kArray, elem: []jsonField{{name: "x", kind: kNumber}, {name: "obj", kind: kObject, elem: []jsonField{{name: "deep", alt: "d_eep", kind: kAny}}}}},
	}
	tests := []struct {
		name, data string
		wantField  string // "" none
		wantOK     bool
	}{
		{"empty object", `{}`, "", true},
		{"fields once", ` { "a" : "x" , "list" : [ {"x":1} , {"x":2,"obj":{"deep":[1,{"a":1,"a":2}]}} ] } `, "", true},
		{"undescribed values are skipped", `{"a":{"a":1,"a":2},"list":[1,"s",null,[{"x":1,"x":2}],{"x":3}]}`, "", true},
		{"string holding brackets and quotes", `{"a":"}]\"{[","a":1}`, "a", true},
		{"repeated at top", `{"a":"x","list":[],"a":"y"}`, "a", true},
		{"repeated in a list item", `{"list":[{"x":1},{"x":1,"x":2}]}`, "list[1].x", true},
		{"repeated under the other spelling", `{"list":[{"obj":{"deep":1,"d_eep":2}}]}`, "list[0].obj.deep", true},
		{"case in a nested object", `{"list":[{"obj":{"DEEP":1}}]}`, "list[0].obj.DEEP", true},
		{"case of the other spelling", `{"list":[{"obj":{"D_EEP":1}}]}`, "list[0].obj.D_EEP", true},
		{"escaped name", `{"\u0061":"x","a":"y"}`, "a", true},
		{"odd name quoted", `{"a b":1}`, `"a b"`, true},
		{"first in body order", `{"list":[{"X":1}],"a":1,"a":2}`, "list[0].X", true},
		{"not an object", `[1]`, "", true},
		{"empty", ``, "", false},
		{"malformed: cut", `{"a":"x","list":[{"x":1}`, "", false},
		{"malformed: no colon", `{"a" "x"}`, "", false},
		{"malformed: bad escape", `{"\x":1}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := checkKeys([]byte(tt.data), schema)
			got := ""
			if p != nil {
				got = p.Field
				if p.Status != http.StatusBadRequest || !strings.Contains(p.Detail, got) {
					t.Errorf("problem %+v", p)
				}
			}
			if got != tt.wantField || ok != tt.wantOK {
				t.Errorf("checkKeys = %q, %v; want %q, %v (%+v)", got, ok, tt.wantField, tt.wantOK, p)
			}
		})
	}
}

// The schemas fit checkKeys: at most maxSchemaFields fields an object,
// nested at most maxScanDepth deep, names distinct; the rls schema has
// protojson's two names of each field.
func TestSchemas(t *testing.T) {
	var walk func(path string, s []jsonField, depth int)
	walk = func(path string, s []jsonField, depth int) {
		if len(s) > maxSchemaFields || depth > maxScanDepth {
			t.Errorf("%s: %d fields at depth %d", path, len(s), depth)
		}
		seen := map[string]bool{}
		for _, f := range s {
			for _, name := range []string{f.name, f.alt} {
				if name != "" && seen[strings.ToLower(name)] {
					t.Errorf("%s: %s twice", path, name)
				}
				seen[strings.ToLower(name)] = true
			}
			if f.elem != nil {
				walk(path+"."+f.name, f.elem, depth+1)
			}
		}
	}
	for name, s := range map[string][]jsonField{"check": checkSchema, "increment": incrementSchema, "rls": rlsSchema} {
		walk(name, s, 1)
	}
	got := fmt.Sprint(rlsSchema)
	for _, want := range []string{"domain", "descriptors", "hitsAddend hits_addend", "requestsPerUnit requests_per_unit", "entries"} {
		if !strings.Contains(got, want) {
			t.Errorf("rls schema %s lacks %q", got, want)
		}
	}
}

// POST /json answers compact JSON, the same bytes in every build: protojson
// alone may put a space after a separator, differently from build to build.
func TestJSONAnswerIsCompact(t *testing.T) {
	n := newTestNode(t, "rls:\n  config: "+rlsFile(t, strictRLSConfig)+"\n", nil)
	w := do(n.api, "POST", "/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"api_key","value":"a"}]},{"entries":[{"key":"api_key","value":"b"}]}]}`)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	body := w.Body.String()
	if strings.ContainsAny(body, " \n\t") {
		t.Errorf("answer %q holds white space", body)
	}
	const wantStart = `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":100,"unit":"HOUR"},"limitRemaining":99,"durationUntilReset":"`
	if !strings.HasPrefix(body, wantStart) {
		t.Errorf("answer %q, want it to start %q", body, wantStart)
	}
}
