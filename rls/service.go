package rls

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratesync/ratesync/ratelimiting"
)

// nearLimitRatio is upstream's default NEAR_LIMIT_RATIO: a hit above this
// share of a limit counts as near the limit in the stats.
const nearLimitRatio = 0.8

// Stats is what one descriptor's decision adds to its rule's counters, as
// upstream keeps them: Key is the rule's FullKey, or with detailed_metric
// the descriptor's own key (its values in place of the rule's).
type Stats struct {
	Domain, Key                                          string
	Rule                                                 string // the rule's FullKey (Key, unless Detailed)
	Detailed                                             bool   // Key holds the descriptor's values
	TotalHits, OverLimit, NearLimit, WithinLimit, Shadow uint64
}

// Options configure a Service.
type Options struct {
	// Namespace is the ratelimiting namespace the counts live in; it must
	// have every unit's window size (Units).
	Namespace string
	// Headers adds draft-11 RateLimit and RateLimit-Policy headers to each
	// response (response_headers_to_add).
	Headers bool
	// MaxKeyBytes bounds a descriptor's counter key; 0 means no bound.
	MaxKeyBytes int
	// Observe, when set, receives each limited descriptor's stats.
	Observe func(Stats)
	// Now is the clock of duration_until_reset; by default the
	// namespace's own (the window each hit was counted in, which may be
	// the store's time: namespace.Config.Clock).
	Now func() time.Time
}

// Units are the window sizes of every unit, which the namespace of a
// Service must have.
func Units() []time.Duration {
	return []time.Duration{Second.Duration(), Minute.Duration(), Hour.Duration(), Day.Duration(), Week.Duration(), Month.Duration(), Year.Duration()}
}

// Service answers Envoy's rate limit service (envoy.service.ratelimit.v3)
// with the rules of a Config, counting in a namespace of a
// ratelimiting.Instance. Rules without an algorithm behave as
// envoyproxy/ratelimit's: a fixed window per unit, epoch aligned, that
// counts every hit, denied ones too, and is over its limit when the count
// after the hit exceeds it. Rules with an algorithm (a ratesync extension)
// are decided by the instance's Check, all of a descriptor's at once: a
// denied hit is not counted. In a synchronous namespace the store decides;
// in a periodic one the node does, from its view of the cluster's counts.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	in   *ratelimiting.Instance
	opts Options
	cfg  atomic.Pointer[Config]
	sync atomic.Bool // the namespace is synchronous: descriptors are counted concurrently

	live atomic.Pointer[Options] // Options.Headers and MaxKeyBytes in force (SetOptions)
}

// NewService returns a Service over cfg. SetConfig replaces the
// configuration while it serves.
func NewService(in *ratelimiting.Instance, cfg *Config, o Options) *Service {
	s := &Service{in: in, opts: o}
	s.live.Store(&o)
	s.SetConfig(cfg)
	return s
}

// SetOptions replaces Headers and MaxKeyBytes for the requests that
// follow; the other options are kept.
func (s *Service) SetOptions(o Options) {
	s.live.Store(&Options{Headers: o.Headers, MaxKeyBytes: o.MaxKeyBytes})
}

// SetConfig makes cfg the configuration of the requests that follow, and
// reads the namespace's sync mode again (call it after the namespace
// changed).
func (s *Service) SetConfig(cfg *Config) {
	for _, nc := range s.in.Namespaces() {
		if nc.Name == s.opts.Namespace {
			s.sync.Store(nc.SyncRate == 0 && nc.Strategy != nil)
		}
	}
	s.cfg.Store(cfg)
}

// Config returns the configuration in force.
func (s *Service) Config() *Config { return s.cfg.Load() }

// descriptor is one descriptor of a request being decided.
type descriptor struct {
	limits    []*RateLimit // nil: no rule applies, or replaced
	unlimited bool
	addend    uint64
	key       string // counter key
	stats     string // stats key
	rule      string // the rule's stats key, when stats holds the descriptor's values
	detailed  bool   // stats holds the descriptor's values: bounded by the observer
	status    *pb.RateLimitResponse_DescriptorStatus
	err       error
}

// ShouldRateLimit decides a request: match each descriptor's rules, drop
// the rules others replace, decide every descriptor, and answer with the
// overall code.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	ds, err := s.matchAll(req)
	if err != nil {
		return nil, err
	}
	dropReplaced(ds)
	s.decideAll(ctx, req.Domain, ds)
	resp, err := respond(ds)
	if err != nil {
		return nil, err
	}
	if s.live.Load().Headers {
		resp.ResponseHeadersToAdd = headers(ds)
	}
	return resp, nil
}

// matchAll matches every descriptor of req against the configuration.
func (s *Service) matchAll(req *pb.RateLimitRequest) ([]descriptor, error) {
	cfg := s.cfg.Load()
	ds := make([]descriptor, len(req.Descriptors))
	for i, d := range req.Descriptors {
		if err := s.match(cfg, req, i, d, &ds[i]); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// dropReplaced takes out the rules that another rule of the request
// replaces (upstream's replaces), but for unlimited ones: upstream takes an
// unlimited rule out before replacing, so it is never replaced.
func dropReplaced(ds []descriptor) {
	replacing := map[string]bool{}
	for i := range ds {
		for _, l := range ds[i].limits {
			for _, r := range l.Replaces {
				replacing[r] = true
			}
		}
	}
	if len(replacing) == 0 {
		return
	}
	for i := range ds {
		if ds[i].unlimited {
			continue
		}
		kept := ds[i].limits[:0:0]
		for _, l := range ds[i].limits {
			if l.Name == "" || !replacing[l.Name] {
				kept = append(kept, l)
			}
		}
		ds[i].limits = kept
	}
}

// respond gathers the decided descriptors' statuses and the overall code:
// over the limit when a descriptor is, or when every descriptor in quota
// mode is (and there is one); the first descriptor's error, if any.
func respond(ds []descriptor) (*pb.RateLimitResponse, error) {
	resp := &pb.RateLimitResponse{Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(ds))}
	failed, quota, quotaFailed := 0, 0, 0
	for i := range ds {
		d := &ds[i]
		if d.err != nil {
			return nil, d.err
		}
		resp.Statuses[i] = d.status
		quotaMode := len(d.limits) > 0 && d.limits[0].QuotaMode && !d.unlimited
		over := d.status.Code == pb.RateLimitResponse_OVER_LIMIT
		switch {
		case quotaMode && over:
			quota, quotaFailed = quota+1, quotaFailed+1
		case quotaMode:
			quota++
		case over:
			failed++
		}
	}
	resp.OverallCode = pb.RateLimitResponse_OK
	if failed > 0 || (quota > 0 && quota == quotaFailed) {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	return resp, nil
}

// match finds the rules of descriptor i (an override first, as upstream),
// its hits and its counter key.
func (s *Service) match(cfg *Config, req *pb.RateLimitRequest, i int, d *ratelimitv3.RateLimitDescriptor, out *descriptor) error {
	entries := make([]Entry, len(d.GetEntries()))
	for j, e := range d.GetEntries() {
		entries[j] = Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	if h := d.GetHitsAddend(); h != nil {
		out.addend = h.GetValue()
	} else {
		out.addend = max(1, uint64(req.GetHitsAddend()))
	}
	m, err := cfg.Limit(req.Domain, entries)
	if errors.Is(err, ErrUnknownDomain) {
		return nil // no rule, and an override is ignored
	}
	if o := d.GetLimit(); o != nil {
		unit := Unit(o.GetUnit())
		if unit.Duration() == 0 {
			return status.Errorf(codes.InvalidArgument, "descriptors[%d].limit.unit %s: must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR", i, o.GetUnit())
		}
		// Upstream names an override's stats by the descriptor's values;
		// they are bounded as detailed ones, under the rule it overrides.
		out.rule = req.Domain
		if m.Limit != nil {
			out.rule = m.Limit.FullKey
		}
		m = Match{Limits: []*RateLimit{{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, FullKey: descriptorKey(req.Domain, entries)}}}
		out.stats, out.detailed = m.Limits[0].FullKey, true
	}
	if len(m.Limits) == 0 {
		return nil
	}
	out.limits = m.Limits
	if m.Limits[0].Unlimited {
		out.unlimited = true
		return nil
	}
	out.key = counterKey(req.Domain, entries, m.Shared)
	if maxKey := s.live.Load().MaxKeyBytes; maxKey > 0 && len(out.key) > maxKey {
		out.key = digestKey(req.Domain, out.key)
	}
	if out.stats == "" {
		out.stats, out.rule = m.Limits[0].FullKey, m.Limits[0].FullKey
		if m.Limits[0].DetailedMetric {
			out.stats, out.detailed = detailedKey(req.Domain, entries, m.Shared), true
		}
	}
	return nil
}

// decideAll decides every descriptor: in a synchronous namespace those
// that need the store at once, each on its own goroutine, so a request
// costs one round trip, not one per descriptor.
func (s *Service) decideAll(ctx context.Context, domain string, ds []descriptor) {
	counted := 0
	for i := range ds {
		if len(ds[i].limits) > 0 && !ds[i].unlimited {
			counted++
		}
	}
	if !s.sync.Load() || counted < 2 {
		for i := range ds {
			s.decide(ctx, domain, &ds[i])
		}
		return
	}
	var wg sync.WaitGroup
	for i := range ds {
		if len(ds[i].limits) > 0 && !ds[i].unlimited {
			wg.Go(func() { s.decide(ctx, domain, &ds[i]) })
		} else {
			s.decide(ctx, domain, &ds[i])
		}
	}
	wg.Wait()
}

// verdict is one rule's answer for a descriptor.
type verdict struct {
	limit     *RateLimit
	over      bool
	remaining float64
	reset     time.Duration
	before    float64 // count before the hit (upstream rules)
	after     float64 // count after it
	denied    bool    // a rule with an algorithm that did not count the hit
}

// decide decides one descriptor and sets its status: upstream rules count
// every hit (count), rules with an algorithm are checked together (check),
// and the most constraining verdict is shown.
func (s *Service) decide(ctx context.Context, domain string, d *descriptor) {
	switch {
	case d.unlimited:
		d.status = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		return
	case len(d.limits) == 0:
		d.status = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		return
	}
	verdicts := make([]verdict, 0, len(d.limits))
	var checkedRules []*RateLimit
	for _, l := range d.limits {
		if l.Algorithm != Upstream {
			checkedRules = append(checkedRules, l)
			continue
		}
		v, err := s.count(ctx, d, l)
		if err != nil {
			d.err = err
			return
		}
		verdicts = append(verdicts, v)
	}
	if len(checkedRules) > 0 {
		vs, err := s.check(ctx, d, checkedRules)
		if err != nil {
			d.err = err
			return
		}
		verdicts = append(verdicts, vs...)
	}
	shadow := d.limits[0].ShadowMode
	d.status = descriptorStatus(shown(verdicts), shadow)
	if s.opts.Observe != nil {
		s.opts.Observe(s.stats(domain, d, verdicts, shadow))
	}
}

// check decides rules, those of d with an algorithm, in one Check, on the
// descriptor's key with a suffix of their own. More hits than a limit can
// ever take are over, as upstream would answer, with nothing counted.
func (s *Service) check(ctx context.Context, d *descriptor, rules []*RateLimit) ([]verdict, error) {
	limits := make([]ratelimiting.Limit, len(rules))
	for j, l := range rules {
		limits[j] = ratelimitingLimit(l)
	}
	verdicts := make([]verdict, 0, len(rules))
	if !fits(limits, d.addend) {
		for _, l := range rules {
			verdicts = append(verdicts, verdict{limit: l, over: true, denied: true, reset: l.Unit.Duration()})
		}
		return verdicts, nil
	}
	dec, err := s.in.Check(ctx, ratelimiting.Request{Namespace: s.opts.Namespace, Key: d.key + "|", Cost: float64(d.addend), Limits: limits})
	if err != nil {
		return nil, grpcError(err)
	}
	for j, st := range dec.Limits {
		v := verdict{limit: rules[j], over: !dec.Allowed && !st.Allowed, remaining: st.Remaining, reset: st.Reset, after: st.Rate}
		if v.over {
			v.reset = st.RetryAfter
		}
		v.before, v.denied = v.after, !dec.Allowed
		if dec.Allowed {
			v.before = v.after - float64(d.addend)
		}
		verdicts = append(verdicts, v)
	}
	return verdicts, nil
}

// shown returns the verdict a descriptor's status shows: the first over
// the limit, else the one with the least remaining.
func shown(verdicts []verdict) verdict {
	v := verdicts[0]
	for _, w := range verdicts[1:] {
		if (w.over && !v.over) || (w.over == v.over && w.remaining < v.remaining) {
			v = w
		}
	}
	return v
}

// descriptorStatus is a descriptor's status from the verdict shown: over
// the limit (OK in shadow mode), or OK with what remains.
func descriptorStatus(v verdict, shadow bool) *pb.RateLimitResponse_DescriptorStatus {
	st := &pb.RateLimitResponse_DescriptorStatus{
		Code:               pb.RateLimitResponse_OK,
		CurrentLimit:       &pb.RateLimitResponse_RateLimit{Name: v.limit.Name, RequestsPerUnit: v.limit.RequestsPerUnit, Unit: pb.RateLimitResponse_RateLimit_Unit(v.limit.Unit)},
		DurationUntilReset: wholeSeconds(v.reset),
	}
	if v.over {
		if !shadow {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
	} else {
		st.LimitRemaining = uint32(min(math.Max(0, math.Floor(v.remaining)), math.MaxUint32))
	}
	return st
}

// count counts a hit of upstream rule l: the window's count after it, and
// the verdict upstream gives it.
func (s *Service) count(ctx context.Context, d *descriptor, l *RateLimit) (verdict, error) {
	size := l.Unit.Duration()
	w, err := s.in.Increment(ctx, s.opts.Namespace, d.key, size, float64(d.addend))
	if err != nil {
		return verdict{}, grpcError(err)
	}
	limit := float64(l.RequestsPerUnit)
	v := verdict{limit: l, before: w.Current - float64(d.addend), after: w.Current}
	v.over = v.after > limit
	v.remaining = limit - v.after
	v.reset = resetOf(w, s.opts.Now)
	return v, nil
}

// resetOf returns upstream's duration_until_reset of w, a window of whole
// seconds: the unit's seconds minus the whole seconds elapsed in it, as of
// now, or (now nil) as of the instant the window was read at, on the
// namespace's clock.
func resetOf(w ratelimiting.Window, now func() time.Time) time.Duration {
	sec := int64(w.Size / time.Second)
	if now != nil {
		return time.Duration(sec-now().Unix()%sec) * time.Second
	}
	size := w.Size.Milliseconds()
	elapsed := size - int64(math.Round(w.Weight*float64(size))) // ms into the window
	return time.Duration(sec-elapsed/1000) * time.Second
}

// stats returns what a decided descriptor adds to its rule's stats, with
// upstream's arithmetic: the hits above the near-limit threshold (80% of
// the limit) are near the limit, those above the limit over it.
func (s *Service) stats(domain string, d *descriptor, verdicts []verdict, shadow bool) Stats {
	st := Stats{Domain: domain, Key: d.stats, Rule: d.rule, Detailed: d.detailed, TotalHits: d.addend}
	v := verdicts[0] // the descriptor's first rule, as upstream has one
	for _, w := range verdicts {
		if w.limit == d.limits[0] {
			v = w
		}
	}
	limit := float64(v.limit.RequestsPerUnit)
	near := math.Floor(float64(float32(limit) * nearLimitRatio))
	if v.over {
		switch {
		case v.denied || v.before >= limit:
			st.OverLimit = d.addend
		default:
			st.OverLimit = hits(v.after - limit)
			st.NearLimit = hits(limit - math.Max(near, v.before))
		}
		if shadow {
			st.Shadow = st.OverLimit
		}
		return st
	}
	st.WithinLimit = d.addend
	if v.after > near {
		if v.before >= near {
			st.NearLimit = d.addend
		} else {
			st.NearLimit = hits(v.after - near)
		}
	}
	return st
}

// hits converts a difference of counts to a number of hits: never
// negative, at most MaxUint64.
func hits(f float64) uint64 {
	switch {
	case !(f > 0):
		return 0
	case f >= math.MaxUint64:
		return math.MaxUint64
	}
	return uint64(f)
}

// fits reports whether addend hits could ever pass every limit: within
// each window's limit and each bucket's capacity.
func fits(limits []ratelimiting.Limit, addend uint64) bool {
	for _, l := range limits {
		most := l.Limit
		if l.Burst > 0 {
			most = l.Burst
		}
		if float64(addend) > most {
			return false
		}
	}
	return true
}

// ratelimitingLimit returns the ratelimiting.Limit of an extension rule.
func ratelimitingLimit(l *RateLimit) ratelimiting.Limit {
	out := ratelimiting.Limit{Limit: float64(l.RequestsPerUnit), Window: l.Unit.Duration(), Burst: l.Burst}
	switch l.Algorithm {
	case Sliding:
		out.Algorithm = ratelimiting.SlidingWindow
	case Fixed:
		out.Algorithm = ratelimiting.FixedWindow
	case Anchored:
		out.Algorithm = ratelimiting.AnchoredWindow
	case SlidingLog:
		out.Algorithm = ratelimiting.SlidingLog
	case TokenBucket:
		out.Algorithm = ratelimiting.TokenBucket
	case LeakyBucket:
		out.Algorithm = ratelimiting.LeakyBucket
	}
	return out
}

// Limits returns the ratelimiting.Limit of each extension rule of the
// configuration, with the rule: what a node validates against the
// namespace the service counts in.
func (c *Config) Limits() (rules []*RateLimit, limits []ratelimiting.Limit) {
	var walk func(l *level)
	walk = func(l *level) {
		for _, r := range l.limits {
			if r.Algorithm != Upstream {
				rules, limits = append(rules, r), append(limits, ratelimitingLimit(r))
			}
		}
		for _, key := range sortedKeys(l.children) {
			walk(l.children[key])
		}
	}
	for _, d := range c.Domains() {
		walk(c.domains[d])
	}
	return rules, limits
}

// grpcError maps an error of the instance to a gRPC status: bad input is
// InvalidArgument, the rest Unavailable (Envoy then applies its
// failure_mode_deny).
func grpcError(err error) error {
	if errors.Is(err, ratelimiting.ErrInvalidInput) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// counterKey is the key a descriptor counts under: the domain and each
// entry's key and value (the share_threshold pattern in place of the value
// where one applies), escaped so that no two descriptors share a key.
func counterKey(domain string, entries []Entry, shared []string) string {
	var b strings.Builder
	escape(&b, domain)
	for i, e := range entries {
		v := e.Value
		if i < len(shared) && shared[i] != "" {
			v = shared[i]
		}
		b.WriteByte('|')
		escape(&b, e.Key)
		b.WriteByte('=')
		escape(&b, v)
	}
	return b.String()
}

func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '|', '=', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
}

// detailedKey is upstream's stats name of a descriptor under a
// detailed_metric rule: domain.key_value for every entry (key_ when the
// value is empty), or, when a share_threshold wildcard matched, its
// pattern in place of that entry's value and key alone for an empty value.
func detailedKey(domain string, entries []Entry, shared []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		switch {
		case shared == nil:
			b.WriteByte('_')
			b.WriteString(e.Value)
		case shared[i] != "":
			b.WriteByte('_')
			b.WriteString(shared[i])
		case e.Value != "":
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// digestKey stands for a counter key longer than the node's bound: the
// domain and the key's SHA-256, which no other key can be (an entry always
// holds an unescaped '=', a digest never does).
func digestKey(domain, key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	escape(&b, domain)
	b.WriteString("|#")
	b.WriteString(base64.RawURLEncoding.EncodeToString(sum[:]))
	return b.String()
}

// descriptorKey is upstream's name of a descriptor in its stats:
// domain.key_value.key_value.
func descriptorKey(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// headers returns draft-11 RateLimit-Policy and RateLimit headers for the
// limited descriptors: one item per descriptor, named by its rule's name
// or, unnamed, its place in the request ("descriptors[1]").
func headers(ds []descriptor) []*commonv3.HeaderValue {
	var policy, state []byte
	for i := range ds {
		st := ds[i].status
		if st == nil || st.CurrentLimit == nil {
			continue
		}
		name := st.CurrentLimit.Name
		if name == "" {
			name = "descriptors[" + strconv.Itoa(i) + "]"
		}
		if len(policy) > 0 {
			policy, state = append(policy, ", "...), append(state, ", "...)
		}
		policy = appendSFString(policy, name)
		policy = fmt.Appendf(policy, ";q=%d;w=%d", st.CurrentLimit.RequestsPerUnit, int64(Unit(st.CurrentLimit.Unit).Duration()/time.Second))
		state = appendSFString(state, name)
		state = fmt.Appendf(state, ";r=%d;t=%d", st.LimitRemaining, st.DurationUntilReset.GetSeconds())
	}
	if len(policy) == 0 {
		return nil
	}
	return []*commonv3.HeaderValue{{Key: "RateLimit-Policy", Value: string(policy)}, {Key: "RateLimit", Value: string(state)}}
}

// appendSFString appends s as a structured-field string (RFC 8941): in
// quotes, with '"' and '\\' escaped; a byte outside printable ASCII, which
// the type cannot hold, becomes '?'.
func appendSFString(buf []byte, s string) []byte {
	buf = append(buf, '"')
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
	return append(buf, '"')
}

// wholeSeconds rounds d up to whole seconds, as duration_until_reset
// carries them.
func wholeSeconds(d time.Duration) *durationpb.Duration {
	return &durationpb.Duration{Seconds: int64((d + time.Second - 1) / time.Second)}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
