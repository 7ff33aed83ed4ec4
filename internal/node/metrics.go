package node

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratesync/ratesync/middleware"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy"
)

// metrics are the node's Prometheus metrics, in a registry of their own.
// Decisions and sync durations are counted as they happen; the state of the
// namespaces and dicts is read from Instance.Stats at scrape time.
type metrics struct {
	reg       *prometheus.Registry
	decisions *prometheus.CounterVec
	syncDur   *prometheus.HistogramVec
	rls       *rlsMetrics
	reloads   *prometheus.CounterVec
	reloadOK  prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratesync_decisions_total",
			Help: "Rate-limit decisions by namespace, policy (empty for /v1/check with limits) and result: allowed, denied, store_down (refused by on_store_down: deny), error.",
		}, []string{"namespace", "policy", "result"}),
		syncDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratesync_sync_duration_seconds",
			Help:    "Duration of exchanges with a namespace's store, by op (sync, fetch, hits, purge) and result (ok, error).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"namespace", "op", "result"}),
	}
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratesync_config_reloads_total",
		Help: "Configuration reloads (SIGHUP or a changed file) by result: ok (applied), error (the running configuration kept).",
	}, []string{"result"})
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	m.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratesync_config_last_reload_success_timestamp_seconds",
		Help: "Unix time the configuration in force was applied: at start, then at each successful reload.",
	})
	m.reloadOK.SetToCurrentTime()
	m.rls = newRLSMetrics(m.reg)
	m.reg.MustRegister(m.decisions, m.syncDur, m.reloads, m.reloadOK,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// reloaded counts a reload.
func (m *metrics) reloaded(ok bool) {
	if !ok {
		m.reloads.WithLabelValues("error").Inc()
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
	m.reloadOK.SetToCurrentTime()
}

// watch registers the collector of in's Stats.
func (m *metrics) watch(in *ratelimiting.Instance) {
	m.reg.MustRegister(&statsCollector{in: in})
}

// observeSync is the instance's sync observer. It does not block.
func (m *metrics) observeSync(r ratelimiting.SyncReport) {
	result := "ok"
	if r.Err != nil {
		result = "error"
	}
	m.syncDur.WithLabelValues(r.Namespace, r.Op, result).Observe(r.Duration.Seconds())
}

// outcomeCounters are the decision counters of one (namespace, policy),
// resolved once so that the hot path adds to a counter without a lookup.
type outcomeCounters [4]prometheus.Counter

func (m *metrics) outcomes(namespace, policy string) *outcomeCounters {
	var oc outcomeCounters
	for o := range oc {
		oc[o] = m.decisions.WithLabelValues(namespace, policy, middleware.Outcome(o).String())
	}
	return &oc
}

// add counts one decision; a nil receiver counts nothing.
func (oc *outcomeCounters) add(o middleware.Outcome) {
	if oc != nil && int(o) < len(oc) {
		oc[o].Inc()
	}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// statsCollector reads Instance.Stats at scrape time.
type statsCollector struct {
	in *ratelimiting.Instance
}

var (
	nsLabel   = []string{"namespace"}
	dictLabel = []string{"dict"}

	descPushes        = prometheus.NewDesc("ratesync_pushes_total", "Batches the store acknowledged.", nsLabel, nil)
	descPushErrors    = prometheus.NewDesc("ratesync_push_errors_total", "Pushes to the store that failed (the batch is retried).", nsLabel, nil)
	descFetchErrors   = prometheus.NewDesc("ratesync_fetch_errors_total", "Reads of totals from the store that failed.", nsLabel, nil)
	descInFlight      = prometheus.NewDesc("ratesync_batches_in_flight", "Batches pushed and not yet acknowledged.", nsLabel, nil)
	descInFlightDiffs = prometheus.NewDesc("ratesync_diffs_in_flight", "Diffs in the batches in flight.", nsLabel, nil)
	descPending       = prometheus.NewDesc("ratesync_diffs_pending", "Counters with a diff waiting for the next push.", nsLabel, nil)
	descLate          = prometheus.NewDesc("ratesync_late_diffs_dropped_total", "Diffs dropped because their window was over before they reached the store.", nsLabel, nil)
	descLocalHits     = prometheus.NewDesc("ratesync_local_hits_total", "Synchronous hits counted locally while the store failed.", nsLabel, nil)
	descStoreUp       = prometheus.NewDesc("ratesync_store_up", "1 when the last exchange with the namespace's store succeeded, else 0 (namespaces with a store only).", nsLabel, nil)
	descLastGood      = prometheus.NewDesc("ratesync_last_good_sync_timestamp_seconds", "Unix time of the last successful exchange with the store.", nsLabel, nil)
	descEntries       = prometheus.NewDesc("ratesync_dict_entries", "Counters held in the dict.", dictLabel, nil)
	descCapacity      = prometheus.NewDesc("ratesync_dict_capacity", "Counters the dict may hold.", dictLabel, nil)
	descEvictions     = prometheus.NewDesc("ratesync_dict_evictions_total", "Counters evicted to make room.", dictLabel, nil)
	descOverflows     = prometheus.NewDesc("ratesync_dict_overflows_total", "Counters not created because the dict was full (the hit was answered as if the key had no history).", dictLabel, nil)
	descExpired       = prometheus.NewDesc("ratesync_dict_expired_total", "Counters dropped with their expired window.", dictLabel, nil)
	descClockOffset   = prometheus.NewDesc("ratesync_clock_offset_seconds", "The store's clock minus this node's, as last measured (namespaces whose store tells time, once measured; 0 for an in-process store).", nsLabel, nil)
	descStoreNodes    = prometheus.NewDesc("ratesync_store_nodes", "Nodes seen using the namespace's store recently, this one included: what store_down share divides each limit by (namespaces with a store only).", nsLabel, nil)

	// Leased namespaces only.
	descLeasesHeld    = prometheus.NewDesc("ratesync_leases_held", "Grants of quota this node holds.", nsLabel, nil)
	descLeaseGrants   = prometheus.NewDesc("ratesync_lease_grants_total", "Grants of quota the store made to this node.", nsLabel, nil)
	descLeaseGranted  = prometheus.NewDesc("ratesync_lease_granted_units_total", "Units the store granted this node.", nsLabel, nil)
	descLeaseReturned = prometheus.NewDesc("ratesync_lease_returned_units_total", "Granted units this node did not use and gave back to the store.", nsLabel, nil)
	descLeaseExpired  = prometheus.NewDesc("ratesync_lease_expired_units_total", "Granted units this node did not use that stayed counted in the store.", nsLabel, nil)
	descLeaseCalls    = prometheus.NewDesc("ratesync_lease_store_calls_total", "Grant requests this node sent to the store.", nsLabel, nil)
	descLeaseDenials  = prometheus.NewDesc("ratesync_lease_store_denials_total", "Grant requests the store refused.", nsLabel, nil)
	descLeaseLocal    = prometheus.NewDesc("ratesync_lease_local_denials_total", "Requests refused on this node while the store's last refusal stood, without a store call.", nsLabel, nil)
	descStoreDown     = prometheus.NewDesc("ratesync_store_down_decisions_total", "Requests of a leased namespace decided by its store_down behaviour because the store did not answer.", nsLabel, nil)

	allDescs = []*prometheus.Desc{descPushes, descPushErrors, descFetchErrors, descInFlight, descInFlightDiffs, descPending, descLate, descLocalHits, descStoreUp, descLastGood, descEntries, descCapacity, descEvictions, descOverflows, descExpired, descClockOffset, descStoreNodes,
		descLeasesHeld, descLeaseGrants, descLeaseGranted, descLeaseReturned, descLeaseExpired, descLeaseCalls, descLeaseDenials, descLeaseLocal, descStoreDown}
)

// Describe sends every descriptor.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect reads the instance's Stats.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	dicts := map[string]bool{}
	for _, st := range c.in.Stats() {
		ns := st.Config.Name
		if d := st.Dict; !dicts[d.Name] {
			dicts[d.Name] = true
			ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(d.Entries), d.Name)
			ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(d.Capacity), d.Name)
			ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(d.Evictions), d.Name)
			ch <- prometheus.MustNewConstMetric(descOverflows, prometheus.CounterValue, float64(d.Overflows), d.Name)
			ch <- prometheus.MustNewConstMetric(descExpired, prometheus.CounterValue, float64(d.Expired), d.Name)
		}
		if st.Config.Local() {
			continue
		}
		s := st.Sync
		up := 0.0
		if s.StoreUp {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descPushes, prometheus.CounterValue, float64(s.Pushes), ns)
		ch <- prometheus.MustNewConstMetric(descPushErrors, prometheus.CounterValue, float64(s.PushErrors), ns)
		ch <- prometheus.MustNewConstMetric(descFetchErrors, prometheus.CounterValue, float64(s.FetchErrors), ns)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight), ns)
		ch <- prometheus.MustNewConstMetric(descInFlightDiffs, prometheus.GaugeValue, float64(s.InFlightDiffs), ns)
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.Dirty), ns)
		ch <- prometheus.MustNewConstMetric(descLate, prometheus.CounterValue, float64(s.LateDropped), ns)
		ch <- prometheus.MustNewConstMetric(descLocalHits, prometheus.CounterValue, float64(s.LocalHits), ns)
		ch <- prometheus.MustNewConstMetric(descStoreUp, prometheus.GaugeValue, up, ns)
		if !s.LastGood.IsZero() {
			ch <- prometheus.MustNewConstMetric(descLastGood, prometheus.GaugeValue, float64(s.LastGood.UnixNano())/1e9, ns)
		}
		if _, tells := st.Config.Strategy.(strategy.Clock); s.ClockMeasured || !tells {
			ch <- prometheus.MustNewConstMetric(descClockOffset, prometheus.GaugeValue, s.ClockOffset.Seconds(), ns)
		}
		ch <- prometheus.MustNewConstMetric(descStoreNodes, prometheus.GaugeValue, float64(st.Nodes), ns)
		if st.Config.Leases {
			collectLeases(ch, ns, st.Leases)
		}
	}
}

// collectLeases sends the lease figures of the leased namespace ns.
func collectLeases(ch chan<- prometheus.Metric, ns string, l ratelimiting.LeaseStats) {
	ch <- prometheus.MustNewConstMetric(descLeasesHeld, prometheus.GaugeValue, float64(l.Held), ns)
	ch <- prometheus.MustNewConstMetric(descLeaseGrants, prometheus.CounterValue, float64(l.Grants), ns)
	ch <- prometheus.MustNewConstMetric(descLeaseGranted, prometheus.CounterValue, l.Granted, ns)
	ch <- prometheus.MustNewConstMetric(descLeaseReturned, prometheus.CounterValue, l.Returned, ns)
	ch <- prometheus.MustNewConstMetric(descLeaseExpired, prometheus.CounterValue, l.Expired, ns)
	ch <- prometheus.MustNewConstMetric(descLeaseCalls, prometheus.CounterValue, float64(l.StoreCalls), ns)
	ch <- prometheus.MustNewConstMetric(descLeaseDenials, prometheus.CounterValue, float64(l.Denials), ns)
	ch <- prometheus.MustNewConstMetric(descLeaseLocal, prometheus.CounterValue, float64(l.Local), ns)
	ch <- prometheus.MustNewConstMetric(descStoreDown, prometheus.CounterValue, float64(l.Fallbacks), ns)
}
