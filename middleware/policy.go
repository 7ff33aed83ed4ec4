package middleware

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ratesync/ratesync/namespace"
)

// PolicyError is a Policy that Validate (and so New) rejects: it names the
// field, the value given and what is allowed.
type PolicyError struct {
	Policy  string
	Field   string // the Go field: "Limits[1].Window"
	Key     string // the same field as configuration files name it: "limits[1].window"
	Value   string
	Allowed string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("middleware: policy %q: %s %s: %s", e.Policy, e.Key, e.Value, e.Allowed)
}

// Validate reports every field of p that cannot work on the namespace ns,
// each a *PolicyError, joined with errors.Join (errors.As finds the
// first), or nil: at least one limit, each a finite number > 0 over one of
// the namespace's window sizes; a cost (0 means 1) that is finite, not
// negative and within every limit; StoreDownDeny only on a namespace with
// a store. It does not check that p.Namespace names ns.
func (p Policy) Validate(ns namespace.Config) error {
	name := p.Name
	if name == "" {
		name = ns.Name
	}
	var errs []error
	bad := func(field, key, value, allowed string) {
		errs = append(errs, &PolicyError{Policy: name, Field: field, Key: key, Value: value, Allowed: allowed})
	}
	cost := p.Cost
	if cost == 0 {
		cost = 1
	}
	costOK := !math.IsNaN(cost) && !math.IsInf(cost, 0) && cost >= 0
	if len(p.Limits) == 0 {
		bad("Limits", "limits", "[]", "at least one limit is required")
	}
	if !costOK {
		bad("Cost", "cost", fmt.Sprint(p.Cost), "must be a finite number > 0")
	}
	if p.StoreDown == StoreDownDeny && ns.Local() {
		bad("StoreDown", "on_store_down", "deny", fmt.Sprintf("namespace %q has no store (it is local only)", ns.Name))
	}
	for i, l := range p.Limits {
		field, key := fmt.Sprintf("Limits[%d]", i), fmt.Sprintf("limits[%d]", i)
		switch {
		case math.IsNaN(l.Limit) || math.IsInf(l.Limit, 0) || l.Limit <= 0:
			bad(field+".Limit", key+".limit", fmt.Sprint(l.Limit), "must be a finite number > 0")
		case costOK && cost > l.Limit:
			bad("Cost", "cost", fmt.Sprint(cost), fmt.Sprintf("must be at most %s.limit (%v): a larger cost can never pass", key, l.Limit))
			costOK = false // one error about the cost
		}
		if !containsWindow(ns.WindowSizes, l.Window) {
			bad(field+".Window", key+".window", FormatWindow(l.Window), fmt.Sprintf("must be one of the window sizes of namespace %q: %s", ns.Name, formatWindows(ns.WindowSizes)))
		}
	}
	return errors.Join(errs...)
}

func containsWindow(sizes []time.Duration, w time.Duration) bool {
	for _, s := range sizes {
		if s == w {
			return true
		}
	}
	return false
}

func formatWindows(sizes []time.Duration) string {
	s := make([]string, len(sizes))
	for i, d := range sizes {
		s[i] = FormatWindow(d)
	}
	return strings.Join(s, ", ")
}
