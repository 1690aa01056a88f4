// Package stats keeps the broker's runtime statistics the way RocketMQ's
// BrokerStatsManager and StoreStatsService do: per topic and per consumer
// group counters (messages and bytes put and got, send-backs, consume
// latency) and the broker's totals, sampled into windows of 10 s, 1 min,
// 10 min, 1 h and 1 day, plus today's totals since local midnight.
//
// # Counting
//
// A statistic is a Set of Items, one per Key (a topic, or a topic and a
// group). Item.Add and Set.Add are the hot path: two atomic adds, and for
// Set.Add a lock-free look-up in a copy-on-write map (a shard of it chosen
// by the key's hash). Neither allocates nor locks once the key exists; the
// first Add of a key takes its shard's mutex and copies that shard's map
// (O(keys/shards)). A caller that counts the same key on every request may
// keep the *Item and call Item.Add.
//
// # Sampling
//
// Stats.Sample (run every second by Stats.Run, or called by tests with a
// time of their choosing) takes a snapshot of every item's two counters
// into rings: every second (11 samples: the last 10 s), every 10 s (7: the
// last minute), every 10 min (7: the last hour) and every hour (25: the
// last day). The rings are the sampler's; readers copy what they need under
// the Set's read lock, which the hot path never takes.
//
// # Reading
//
// Window reads a rate over one window (RocketMQ's StatsSnapshot: the sum of
// the values, their TPS, the average value per call); Totals reads an item's
// cumulative counters (for Prometheus counters); Each walks a Set's keys;
// Today reads the broker's totals at the last two midnights and now. Every
// read is safe for concurrent use with counting and sampling.
package stats

import (
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Statistic names: RocketMQ's (BrokerStatsManager), as VIEW_BROKER_STATS_DATA
// (315) and the exporter name them.
const (
	TopicPutNums    = "TOPIC_PUT_NUMS"    // key: topic; value: messages, times: send requests
	TopicPutSize    = "TOPIC_PUT_SIZE"    // key: topic; value: body bytes
	GroupGetNums    = "GROUP_GET_NUMS"    // key: topic@group; value: messages pulled, times: pulls that found some
	GroupGetSize    = "GROUP_GET_SIZE"    // key: topic@group; value: bytes pulled
	GroupGetLatency = "GROUP_GET_LATENCY" // key: topic@group; value: ms from store to pull of a pull's first message
	SendBackNums    = "SNDBCK_PUT_NUMS"   // key: topic@group; value: messages sent back for retry
	BrokerPutNums   = "BROKER_PUT_NUMS"   // key: the cluster name; value: messages stored
	BrokerGetNums   = "BROKER_GET_NUMS"   // key: the cluster name; value: messages pulled
	// BrokerPullRequests is Apogee's own: every pull request, found or not
	// (the Java store's getTotalTps). Key: the cluster name.
	BrokerPullRequests = "BROKER_PULL_REQUESTS"
)

// Names lists every statistic a Stats keeps, in a fixed order.
var Names = []string{TopicPutNums, TopicPutSize, GroupGetNums, GroupGetSize, GroupGetLatency,
	SendBackNums, BrokerPutNums, BrokerGetNums, BrokerPullRequests}

// Key identifies an item of a Set: a topic, or a topic and a consumer group.
type Key struct {
	Topic, Group string
}

// String is the key as RocketMQ writes it: "topic", or "topic@group".
func (k Key) String() string {
	if k.Group == "" {
		return k.Topic
	}
	return k.Topic + "@" + k.Group
}

// ParseKey reads a key written as String writes it. A topic never holds
// '@' (RocketMQ's topic characters are [%|a-zA-Z0-9_-]), so the first '@'
// splits it.
func ParseKey(s string) Key {
	if t, g, ok := strings.Cut(s, "@"); ok {
		return Key{Topic: t, Group: g}
	}
	return Key{Topic: s}
}

// Window is one of the periods a rate is read over.
type Window int

// The windows. Each is read from the samples of its ring: 10 s from the
// per-second ring, 1 min from the 10-s ring, 10 min and 1 h from the 10-min
// ring, a day from the hourly ring.
const (
	Window10s Window = iota
	Window1m
	Window10m
	Window1h
	Window1d
)

// Duration is the window's length.
func (w Window) Duration() time.Duration {
	return [...]time.Duration{10 * time.Second, time.Minute, 10 * time.Minute, time.Hour, 24 * time.Hour}[w]
}

// ring layout: the tiers sampled, their period and how many samples each keeps.
type tier struct {
	period time.Duration
	keep   int
}

var tiers = [...]tier{
	{time.Second, 11},     // 10 s
	{10 * time.Second, 7}, // 1 min
	{10 * time.Minute, 7}, // 1 h (and 10 min: its last two samples)
	{time.Hour, 25},       // 1 day
}

// windowTier maps a window to its tier and the number of sample intervals it spans.
var windowTier = [...]struct{ tier, span int }{
	Window10s: {0, 10},
	Window1m:  {1, 6},
	Window10m: {2, 1},
	Window1h:  {2, 6},
	Window1d:  {3, 24},
}

const sampleLen = 11 + 7 + 7 + 25 // samples per item, over all tiers

// sample is one snapshot of an item's counters.
type sample struct{ value, times int64 }

// Item is one key's counters. Add is safe for concurrent use and neither
// allocates nor locks.
type Item struct {
	value atomic.Int64
	times atomic.Int64

	// samples, by tier (offsets tierBase), each a ring whose newest entry is
	// at the tier's head; written by the sampler under the Set's mu.
	samples [sampleLen]sample
}

// Add counts times calls carrying value in total (messages, bytes, ms).
func (it *Item) Add(value, times int64) {
	it.value.Add(value)
	it.times.Add(times)
}

// Totals is an item's cumulative counters since the broker started (or the
// key was first counted).
type Totals struct {
	Value, Times int64
}

// Totals reads the cumulative counters.
func (it *Item) Totals() Totals {
	return Totals{Value: it.value.Load(), Times: it.times.Load()}
}

var tierBase = func() (b [len(tiers)]int) {
	n := 0
	for i, t := range tiers {
		b[i] = n
		n += t.keep
	}
	return b
}()

const shards = 16

type shard struct {
	mu sync.Mutex                    // serialises creation
	m  atomic.Pointer[map[Key]*Item] // copy on write
}

// Set is one statistic's items by key.
type Set struct {
	name string
	seed maphash.Seed

	shards [shards]shard

	// mu guards the samples of every item and the rings' bookkeeping
	// (count and head per tier, the sample times): the sampler writes under
	// it, readers read under its read lock. Counting never takes it.
	mu    sync.RWMutex
	count [len(tiers)]int      // samples taken per tier (capped at keep)
	head  [len(tiers)]int      // index of the newest sample per tier
	at    [sampleLen]time.Time // when each sample slot was taken
}

func newSet(name string, seed maphash.Seed) *Set {
	s := &Set{name: name, seed: seed}
	for i := range s.shards {
		m := map[Key]*Item{}
		s.shards[i].m.Store(&m)
	}
	return s
}

// Name is the statistic's name (TOPIC_PUT_NUMS, ...).
func (s *Set) Name() string { return s.name }

// hashKey is k's hash under seed; every Set of a Stats shares the seed, so
// one hash serves a key's items in several sets.
func hashKey(seed maphash.Seed, k Key) uint64 {
	h := maphash.String(seed, k.Topic)
	if k.Group != "" {
		h = h*31 ^ maphash.String(seed, k.Group)
	}
	return h
}

func (s *Set) shardOf(k Key) *shard { return &s.shards[hashKey(s.seed, k)%shards] }

// Item returns k's item, created on first use. The fast path (an existing
// key) is a hash and a map read: no lock, no allocation.
func (s *Set) Item(k Key) *Item { return s.itemHashed(k, hashKey(s.seed, k)) }

func (s *Set) itemHashed(k Key, h uint64) *Item {
	sh := &s.shards[h%shards]
	if it := (*sh.m.Load())[k]; it != nil {
		return it
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := *sh.m.Load()
	if it := old[k]; it != nil {
		return it
	}
	it := &Item{}
	m := make(map[Key]*Item, len(old)+1)
	for kk, v := range old {
		m[kk] = v
	}
	m[k] = it
	sh.m.Store(&m)
	return it
}

// Add counts on k's item (see Item.Add).
func (s *Set) Add(k Key, value, times int64) { s.Item(k).Add(value, times) }

// Lookup returns k's item without creating it.
func (s *Set) Lookup(k Key) (*Item, bool) {
	it := (*s.shardOf(k).m.Load())[k]
	return it, it != nil
}

// Remove drops the items whose key drop reports (a deleted topic or group).
func (s *Set) Remove(drop func(Key) bool) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		old := *sh.m.Load()
		var m map[Key]*Item
		for k := range old {
			if drop(k) {
				if m == nil {
					m = make(map[Key]*Item, len(old))
					for kk, vv := range old {
						m[kk] = vv
					}
				}
				delete(m, k)
			}
		}
		if m != nil {
			sh.m.Store(&m)
		}
		sh.mu.Unlock()
	}
}

// Keys returns every key of the set, sorted by topic then group.
func (s *Set) Keys() []Key {
	var out []Key
	for i := range s.shards {
		for k := range *s.shards[i].m.Load() {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Group < out[j].Group
	})
	return out
}

// Each calls fn with every key and its cumulative counters (in no order).
func (s *Set) Each(fn func(Key, Totals)) {
	for i := range s.shards {
		for k, it := range *s.shards[i].m.Load() {
			fn(k, it.Totals())
		}
	}
}

// Len is the number of keys.
func (s *Set) Len() int {
	n := 0
	for i := range s.shards {
		n += len(*s.shards[i].m.Load())
	}
	return n
}

// sampleTier takes a sample of every item into tier ti at now.
func (s *Set) sampleTier(ti int, now time.Time) {
	t := tiers[ti]
	base := tierBase[ti]
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.head[ti]
	if s.count[ti] > 0 {
		h = (h + 1) % t.keep
	}
	s.head[ti] = h
	if s.count[ti] < t.keep {
		s.count[ti]++
	}
	s.at[base+h] = now
	for i := range s.shards {
		for _, it := range *s.shards[i].m.Load() {
			it.samples[base+h] = sample{value: it.value.Load(), times: it.times.Load()}
		}
	}
}

// Snapshot is a rate over a window: RocketMQ's StatsSnapshot.
type Snapshot struct {
	// Sum is the values counted in the window (messages, bytes, ms).
	Sum int64
	// Times is the calls counted in the window.
	Times int64
	// TPS is Sum per second over the window's sampled span.
	TPS float64
	// AvgPT is Sum / Times (0 without calls): the average value per call
	// (ms per pull for GROUP_GET_LATENCY).
	AvgPT float64
}

// Window reads k's rate over w from its samples: between the newest sample
// and the one w before it (the oldest there is while the ring fills). Zero
// when the key is unknown or fewer than two samples were taken.
func (s *Set) Window(k Key, w Window) Snapshot {
	it, ok := s.Lookup(k)
	if !ok {
		return Snapshot{}
	}
	return s.window(it, w)
}

func (s *Set) window(it *Item, w Window) Snapshot {
	wt := windowTier[w]
	t := tiers[wt.tier]
	base := tierBase[wt.tier]
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := s.count[wt.tier]
	if n < 2 {
		return Snapshot{}
	}
	span := min(wt.span, n-1)
	last := s.head[wt.tier]
	first := (last - span + t.keep) % t.keep
	a, b := it.samples[base+first], it.samples[base+last]
	ms := s.at[base+last].Sub(s.at[base+first]).Milliseconds()
	ss := Snapshot{Sum: b.value - a.value, Times: b.times - a.times}
	if ms > 0 {
		ss.TPS = float64(ss.Sum) * 1000 / float64(ms)
	}
	if ss.Times > 0 {
		ss.AvgPT = float64(ss.Sum) / float64(ss.Times)
	}
	return ss
}

// Day totals: the broker's put and get totals at the last two local
// midnights and now (GET_BROKER_RUNTIME_INFO's msgPutTotalYesterdayMorning,
// msgPutTotalTodayMorning, msgPutTotalTodayNow and the get ones).
type Day struct {
	PutYesterdayMorning, PutTodayMorning, PutNow int64
	GetYesterdayMorning, GetTodayMorning, GetNow int64
}

// Options configure a Stats.
type Options struct {
	// BrokerKey is the key of the broker's own items (BROKER_PUT_NUMS,
	// BROKER_GET_NUMS): RocketMQ uses the cluster name. Default
	// "DefaultCluster".
	BrokerKey string
	// Location decides when a day starts (Today). Default time.Local.
	Location *time.Location
}

// Stats is every statistic of a broker. Its methods are safe for concurrent
// use.
type Stats struct {
	opts Options
	sets map[string]*Set
	seed maphash.Seed // shared by the sets

	// Shortcuts to the sets and the broker's items (the hot path).
	TopicPut, TopicPutSize, GroupGet, GroupGetSize, GroupLatency, SendBack *Set
	brokerPut, brokerGet, pulls                                            *Item

	mu       sync.Mutex // the sampler's: next sample times, the day's bookkeeping
	next     [len(tiers)]time.Time
	day      Day       // morning totals (the Now fields are unused here)
	dayStart time.Time // the midnight the current day began
	started  bool
}

// New returns an empty Stats.
func New(o Options) *Stats {
	if o.BrokerKey == "" {
		o.BrokerKey = "DefaultCluster"
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	s := &Stats{opts: o, sets: map[string]*Set{}, seed: maphash.MakeSeed()}
	for _, n := range Names {
		s.sets[n] = newSet(n, s.seed)
	}
	s.TopicPut, s.TopicPutSize = s.sets[TopicPutNums], s.sets[TopicPutSize]
	s.GroupGet, s.GroupGetSize = s.sets[GroupGetNums], s.sets[GroupGetSize]
	s.GroupLatency, s.SendBack = s.sets[GroupGetLatency], s.sets[SendBackNums]
	s.brokerPut = s.sets[BrokerPutNums].Item(Key{Topic: o.BrokerKey})
	s.brokerGet = s.sets[BrokerGetNums].Item(Key{Topic: o.BrokerKey})
	s.pulls = s.sets[BrokerPullRequests].Item(Key{Topic: o.BrokerKey})
	return s
}

// BrokerKey is the key of the broker's own items.
func (s *Stats) BrokerKey() string { return s.opts.BrokerKey }

// Set returns the named statistic, or nil for a name Stats does not keep.
func (s *Stats) Set(name string) *Set { return s.sets[name] }

// Put counts a send of msgs messages of bytes body bytes to topic (one
// request): TOPIC_PUT_NUMS, TOPIC_PUT_SIZE and BROKER_PUT_NUMS.
func (s *Stats) Put(topic string, msgs, bytes int64) {
	k := Key{Topic: topic}
	h := hashKey(s.seed, k)
	s.TopicPut.itemHashed(k, h).Add(msgs, 1)
	s.TopicPutSize.itemHashed(k, h).Add(bytes, 1)
	s.brokerPut.Add(msgs, 1)
}

// PutCounter is one topic's put counters (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE,
// and the broker's BROKER_PUT_NUMS) resolved once: a send counts on them
// without hashing the topic's name or looking its items up. After
// RemoveTopic its counts go nowhere; its holder must resolve a new one for a
// topic created again (the core keeps one per topic entry, and a re-created
// topic has a new entry).
type PutCounter struct{ nums, size, broker *Item }

// PutCounter resolves topic's put counters, creating its items.
func (s *Stats) PutCounter(topic string) *PutCounter {
	k := Key{Topic: topic}
	h := hashKey(s.seed, k)
	return &PutCounter{nums: s.TopicPut.itemHashed(k, h), size: s.TopicPutSize.itemHashed(k, h), broker: s.brokerPut}
}

// Put counts as Stats.Put does for its topic.
func (p *PutCounter) Put(msgs, bytes int64) {
	p.nums.Add(msgs, 1)
	p.size.Add(bytes, 1)
	p.broker.Add(msgs, 1)
}

// Get counts a pull that found msgs messages of bytes bytes, the first of
// them stored latencyMs before the pull: GROUP_GET_NUMS, GROUP_GET_SIZE,
// GROUP_GET_LATENCY and BROKER_GET_NUMS.
func (s *Stats) Get(topic, group string, msgs, bytes, latencyMs int64) {
	k := Key{Topic: topic, Group: group}
	h := hashKey(s.seed, k)
	s.GroupGet.itemHashed(k, h).Add(msgs, 1)
	s.GroupGetSize.itemHashed(k, h).Add(bytes, 1)
	s.GroupLatency.itemHashed(k, h).Add(max(latencyMs, 0), 1)
	s.brokerGet.Add(msgs, 1)
}

// Pulled counts a pull request, whatever it found (BROKER_PULL_REQUESTS).
func (s *Stats) Pulled() { s.pulls.Add(1, 1) }

// Pulls reads the rate of pull requests over w.
func (s *Stats) Pulls(w Window) Snapshot {
	return s.sets[BrokerPullRequests].window(s.pulls, w)
}

// SentBack counts a message a consumer of group sent back for retry
// (SNDBCK_PUT_NUMS).
func (s *Stats) SentBack(topic, group string) {
	s.SendBack.Add(Key{Topic: topic, Group: group}, 1, 1)
}

// BrokerTotals reads the broker's cumulative put and get counts (messages).
func (s *Stats) BrokerTotals() (put, get Totals) {
	return s.brokerPut.Totals(), s.brokerGet.Totals()
}

// BrokerPut and BrokerGet read the broker's put and get rate (messages per
// second) over w.
func (s *Stats) BrokerPut(w Window) Snapshot {
	return s.sets[BrokerPutNums].window(s.brokerPut, w)
}

// BrokerGet reads the broker's get rate over w (see BrokerPut).
func (s *Stats) BrokerGet(w Window) Snapshot {
	return s.sets[BrokerGetNums].window(s.brokerGet, w)
}

// Today reads the broker's totals at the last two midnights and now.
func (s *Stats) Today() Day {
	s.mu.Lock()
	d := s.day
	s.mu.Unlock()
	put, get := s.BrokerTotals()
	d.PutNow, d.GetNow = put.Value, get.Value
	return d
}

// RemoveTopic drops a deleted topic's items from every set.
func (s *Stats) RemoveTopic(topic string) {
	for _, n := range Names {
		if n == BrokerPutNums || n == BrokerGetNums || n == BrokerPullRequests {
			continue
		}
		s.sets[n].Remove(func(k Key) bool { return k.Topic == topic })
	}
}

// RemoveGroup drops a deleted group's items from every set.
func (s *Stats) RemoveGroup(group string) {
	for _, n := range Names {
		if n == BrokerPutNums || n == BrokerGetNums || n == BrokerPullRequests {
			continue
		}
		s.sets[n].Remove(func(k Key) bool { return k.Group == group })
	}
}

// Sample takes the samples due at now: every tier whose period has passed
// since its last sample (all of them on the first call), and moves the day
// forward at local midnight. Run calls it every second; tests call it with
// the times they choose (which must not go backwards).
func (s *Stats) Sample(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		s.dayStart = midnight(now, s.opts.Location)
	}
	for ti, t := range tiers {
		if !s.next[ti].IsZero() && now.Before(s.next[ti]) {
			continue
		}
		for _, set := range s.sets {
			set.sampleTier(ti, now)
		}
		s.next[ti] = now.Add(t.period)
	}
	if m := midnight(now, s.opts.Location); m.After(s.dayStart) {
		put, get := s.BrokerTotals()
		s.day.PutYesterdayMorning, s.day.PutTodayMorning = s.day.PutTodayMorning, put.Value
		s.day.GetYesterdayMorning, s.day.GetTodayMorning = s.day.GetTodayMorning, get.Value
		if m.Sub(s.dayStart) > 36*time.Hour {
			// More than a day passed between two samples (a suspended
			// machine): yesterday's morning is unknown; it is today's.
			s.day.PutYesterdayMorning, s.day.GetYesterdayMorning = put.Value, get.Value
		}
		s.dayStart = m
	}
}

func midnight(t time.Time, loc *time.Location) time.Time {
	t = t.In(loc)
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
}

// Run samples every second until stop is closed.
func (s *Stats) Run(stop <-chan struct{}) {
	s.Sample(time.Now())
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tk.C:
			s.Sample(now)
		}
	}
}
