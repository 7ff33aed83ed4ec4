package middleware

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// Families selects which rate-limit header families a response carries.
// It is a bit set; the zero value means DefaultFamilies.
type Families uint8

// Header families.
const (
	// FamilyRateLimit is RateLimit-Policy and RateLimit, as
	// draft-ietf-httpapi-ratelimit-headers-11 defines them: one item per
	// limit.
	FamilyRateLimit Families = 1 << iota
	// FamilyXRateLimit is X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds), describing the most constrained limit.
	FamilyXRateLimit

	// DefaultFamilies is what the zero Families means: both families.
	DefaultFamilies = FamilyRateLimit | FamilyXRateLimit
)

// HeaderOptions shapes the rate-limit headers of a response. The zero value
// emits both families, and Retry-After on denials.
type HeaderOptions struct {
	// Hide suppresses every rate-limit header, Retry-After included (Kong's
	// hide_client_headers). Default false: clients learn their quota.
	Hide bool
	// Families selects the header families; 0 means DefaultFamilies.
	Families Families
}

// Canonical header names (net/http canonicalizes "RateLimit-Policy" to
// "Ratelimit-Policy"; header names are case-insensitive on the wire).
const (
	HeaderRateLimitPolicy     = "Ratelimit-Policy"
	HeaderRateLimit           = "Ratelimit"
	HeaderXRateLimitLimit     = "X-Ratelimit-Limit"
	HeaderXRateLimitRemaining = "X-Ratelimit-Remaining"
	HeaderXRateLimitReset     = "X-Ratelimit-Reset"
	HeaderRetryAfter          = "Retry-After"
)

// maxHeaderValuesPerAnswer is how many headers WriteHeaders sets at most.
const maxHeaderValuesPerAnswer = 6

// WriteHeaders sets the rate-limit headers of decision d, made for the
// policy called name, on h:
//
//	RateLimit-Policy: "api/1m";q=100;w=60, "api/1s/fixed";q=10;w=1
//	RateLimit: "api/1m";r=99;t=60, "api/1s/fixed";r=9;t=1
//	X-RateLimit-Limit: 10
//	X-RateLimit-Remaining: 9
//	X-RateLimit-Reset: 1
//	Retry-After: 1 (denied only)
//
// Items are named "<name>/<window>", with "/fixed" for fixed windows,
// "/anchored" for anchored windows, "/sliding_log" for sliding logs,
// "/token_bucket" and "/leaky_bucket" for buckets, and "#<index>" when two
// limits would share a name (a sliding window with a Precision is named as
// one without). q is the limit rounded down, w the window in seconds
// rounded up (a 500ms window is w=1: the field has no sub-second windows,
// and announcing the quota over a longer window never invites a client to
// exceed it). r is the remaining quota, t the seconds until it is whole
// again (LimitState.Reset: for an anchored window, until it closes; for a
// sliding log, until its newest entry stops weighing), rounded up:
//
//	RateLimit-Policy: "api/1m/anchored";q=3;w=60, "api/1h/sliding_log";q=100;w=3600
//	RateLimit: "api/1m/anchored";r=0;t=42, "api/1h/sliding_log";r=97;t=3600
//
// For a bucket, q is its
// capacity (Burst, or Limit when Burst is 0), w the seconds an empty bucket
// takes to fill (capacity / Limit windows, rounded up, at least 1), r the
// whole tokens left (the level's room, for a leaky bucket) and t the
// seconds until it is full (empty) again, rounded up:
//
//	RateLimit-Policy: "api/1m/token_bucket";q=20;w=120
//	RateLimit: "api/1m/token_bucket";r=19;t=6
//
// Every integer is clamped to [0, 999999999999999]: a Structured Field
// integer has at most 15 digits (RFC 9651), and a client discards a whole
// field holding a longer one.
//
// The X-RateLimit-* headers describe the most constrained limit: the lowest
// remaining, and on a tie the larger window (Kong's rule); Limit is q's
// number, unrounded; Reset is in seconds from now, rounded up. Retry-After is the decision's RetryAfter in
// whole seconds, rounded up and at least 1.
func WriteHeaders(h http.Header, name string, d ratelimiting.Decision, o HeaderOptions) {
	if o.Hide {
		return
	}
	fam := o.Families
	if fam == 0 {
		fam = DefaultFamilies
	}
	if len(d.Limits) == 0 {
		fam = 0
	}
	// Every value goes into one buffer, turned into one string whose
	// slices are the values; one more allocation holds the value slices.
	var (
		arr  [512]byte
		ends [maxHeaderValuesPerAnswer]int
		keys [maxHeaderValuesPerAnswer]string
		n    int
	)
	buf := arr[:0]
	mark := func(key string) {
		keys[n], ends[n] = key, len(buf)
		n++
	}
	if fam&FamilyRateLimit != 0 {
		// One pass: the RateLimit field goes to a second buffer, appended
		// after the RateLimit-Policy field.
		var arr2 [256]byte
		rl := arr2[:0]
		for i := range d.Limits {
			if i > 0 {
				buf = append(buf, ", "...)
				rl = append(rl, ", "...)
			}
			itemStart := len(buf)
			buf = appendItem(buf, name, d.Limits, i)
			rl = append(rl, buf[itemStart:]...)
			buf = append(buf, ";q="...)
			buf = strconv.AppendInt(buf, wholeNumber(quota(d.Limits[i].Limit)), 10)
			buf = append(buf, ";w="...)
			buf = strconv.AppendInt(buf, policyWindow(d.Limits[i].Limit), 10)
			rl = append(rl, ";r="...)
			rl = strconv.AppendInt(rl, wholeNumber(d.Limits[i].Remaining), 10)
			rl = append(rl, ";t="...)
			rl = strconv.AppendInt(rl, ceilSeconds(d.Limits[i].Reset, 0), 10)
		}
		mark(HeaderRateLimitPolicy)
		buf = append(buf, rl...)
		mark(HeaderRateLimit)
	}
	if fam&FamilyXRateLimit != 0 {
		m := MostConstrained(d)
		buf = strconv.AppendFloat(buf, quota(m.Limit), 'f', -1, 64)
		mark(HeaderXRateLimitLimit)
		buf = strconv.AppendInt(buf, wholeNumber(m.Remaining), 10)
		mark(HeaderXRateLimitRemaining)
		buf = strconv.AppendInt(buf, ceilSeconds(m.Reset, 0), 10)
		mark(HeaderXRateLimitReset)
	}
	if !d.Allowed {
		buf = strconv.AppendInt(buf, RetryAfterSeconds(d), 10)
		mark(HeaderRetryAfter)
	}
	if n == 0 {
		return
	}
	all := string(buf)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = all[start:ends[i]]
		start = ends[i]
		h[keys[i]] = vals[i : i+1 : i+1]
	}
}

// MostConstrained returns the limit state the X-RateLimit-* headers
// describe: the lowest remaining, and on a tie the larger window. d must
// have at least one limit.
func MostConstrained(d ratelimiting.Decision) ratelimiting.LimitState {
	m := d.Limits[0]
	for _, s := range d.Limits[1:] {
		if s.Remaining < m.Remaining || (s.Remaining == m.Remaining && s.Limit.Window > m.Limit.Window) {
			m = s
		}
	}
	return m
}

// RetryAfterSeconds returns d.RetryAfter in whole seconds, rounded up, at
// least 1 (a denied client that retries at once is denied again) and at
// most 999999999999999.
func RetryAfterSeconds(d ratelimiting.Decision) int64 {
	return ceilSeconds(d.RetryAfter, 1)
}

// maxHeaderInteger is the largest integer the headers write: a Structured
// Field integer (RFC 9651) has at most 15 digits. Larger values are
// written as this.
const maxHeaderInteger = 999_999_999_999_999

// wholeNumber returns f rounded down, clamped to [0, maxHeaderInteger].
func wholeNumber(f float64) int64 {
	switch {
	case !(f > 0): // also NaN
		return 0
	case f >= maxHeaderInteger:
		return maxHeaderInteger
	}
	return int64(math.Floor(f))
}

// ceilSeconds returns d in seconds rounded up, at least least, at most
// maxHeaderInteger.
func ceilSeconds(d time.Duration, least int64) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return min(max(s, least), maxHeaderInteger)
}

// bucket reports whether l is a token or leaky bucket.
func bucket(l ratelimiting.Limit) bool {
	return l.Algorithm == ratelimiting.TokenBucket || l.Algorithm == ratelimiting.LeakyBucket
}

// capacity returns a bucket's capacity: Burst, or Limit when Burst is 0.
func capacity(l ratelimiting.Limit) float64 {
	if l.Burst == 0 {
		return l.Limit
	}
	return l.Burst
}

// quota is what q (and X-RateLimit-Limit) announce: a window's limit, a
// bucket's capacity.
func quota(l ratelimiting.Limit) float64 {
	if bucket(l) {
		return capacity(l)
	}
	return l.Limit
}

// policyWindow is w, in whole seconds, at least 1: a window's size rounded
// up; for a bucket, the time an empty bucket takes to fill (capacity /
// Limit windows), rounded up.
func policyWindow(l ratelimiting.Limit) int64 {
	if !bucket(l) {
		return ceilSeconds(l.Window, 1)
	}
	// In ms first: with whole numbers the quotient is exact when the fill
	// time is a whole number of ms, and ceil adds no spurious second.
	s := math.Ceil(capacity(l) * float64(l.Window.Milliseconds()) / l.Limit / 1000)
	switch {
	case s >= maxHeaderInteger:
		return maxHeaderInteger
	case !(s >= 1): // also NaN
		return 1
	}
	return int64(s)
}

// itemSuffix names how l counts, after its window in an item's name:
// nothing for a sliding window.
func itemSuffix(l ratelimiting.Limit) string {
	switch {
	case l.Algorithm == ratelimiting.TokenBucket:
		return "/token_bucket"
	case l.Algorithm == ratelimiting.LeakyBucket:
		return "/leaky_bucket"
	case l.Algorithm == ratelimiting.AnchoredWindow:
		return "/anchored"
	case l.Algorithm == ratelimiting.SlidingLog:
		return "/sliding_log"
	case l.Fixed || l.Algorithm == ratelimiting.FixedWindow:
		return "/fixed"
	}
	return ""
}

// appendItem appends the Structured Field string naming limit i of limits.
func appendItem(buf []byte, name string, limits []ratelimiting.LimitState, i int) []byte {
	l := limits[i].Limit
	buf = append(buf, '"')
	buf = appendSFChars(buf, name)
	buf = append(buf, '/')
	buf = AppendWindow(buf, l.Window)
	suffix := itemSuffix(l)
	buf = append(buf, suffix...)
	for j := range i {
		if o := limits[j].Limit; o.Window == l.Window && itemSuffix(o) == suffix {
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(i), 10)
			break
		}
	}
	return append(buf, '"')
}

// appendSFChars appends s as the inside of a Structured Field string
// (RFC 9651): '"' and '\' escaped, bytes outside printable ASCII as '?'.
func appendSFChars(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			buf = append(buf, '\\', c)
		case c < 0x20 || c > 0x7e:
			buf = append(buf, '?')
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

// FormatWindow formats a window size compactly: "1s", "1m", "1h", "90s",
// "500ms"; the form the node's config and API accept back.
func FormatWindow(d time.Duration) string {
	var arr [24]byte
	return string(AppendWindow(arr[:0], d))
}

// AppendWindow appends FormatWindow(d) to buf.
func AppendWindow(buf []byte, d time.Duration) []byte {
	switch {
	case d <= 0 || d%time.Millisecond != 0:
		return append(buf, d.String()...)
	case d%time.Hour == 0:
		return append(strconv.AppendInt(buf, int64(d/time.Hour), 10), 'h')
	case d%time.Minute == 0:
		return append(strconv.AppendInt(buf, int64(d/time.Minute), 10), 'm')
	case d%time.Second == 0:
		return append(strconv.AppendInt(buf, int64(d/time.Second), 10), 's')
	default:
		return append(strconv.AppendInt(buf, int64(d/time.Millisecond), 10), "ms"...)
	}
}
