package dashboard

import (
	"context"
	"embed"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/core/stats"
	"github.com/apogeemq/apogee/broker/history"
)

// static holds the pages' script and styles, served under /static/:
// uPlot (MIT, leeoniya/uPlot 1.6.32 from npm, its license beside it) and
// dash.js, the dashboard's own (charts and auto-refresh).
//
//go:embed static
var static embed.FS

// readCounts reads what the broker already counts into a history reading:
// the core's cumulative put and get statistics (per topic, per group:
// stats.Set.Each over atomics), the consumer offsets' lag (the walk
// GET_BROKER_CONSUME_STATS does), the send latency histogram and the disk
// ratio. It runs on the sampler's goroutine, once a second, never on a
// message's path.
func (d *Dashboard) readCounts() history.Counts {
	c := d.b.Core()
	rs := c.Admin().Stats()
	put, get := rs.BrokerTotals()
	out := history.Counts{Put: put.Value, Get: get.Value,
		TopicPut: map[string]int64{}, GroupGet: map[string]int64{}, GroupLag: map[string]int64{}}
	rs.TopicPut.Each(func(k stats.Key, t stats.Totals) {
		if !isSystemTopic(c, k.Topic) {
			out.TopicPut[k.Topic] += t.Value
		}
	})
	rs.GroupGet.Each(func(k stats.Key, t stats.Totals) { out.GroupGet[k.Group] += t.Value })
	for _, l := range c.Admin().ConsumerLags(core.LagOptions{}) {
		out.GroupLag[l.Group] += l.Messages
	}
	if d.o.SendLatency != nil {
		out.LatencyBounds, out.LatencyCounts = d.o.SendLatency()
	}
	out.DiskRatio = c.Admin().DiskRatio()
	return out
}

// startHistory starts the sampler; Close stops it.
func (d *Dashboard) startHistory() {
	ctx, cancel := context.WithCancel(context.Background())
	d.stopHistory = cancel
	d.historyDone = make(chan struct{})
	go func() {
		defer close(d.historyDone)
		d.hist.Run(ctx, d.o.SampleInterval, d.readCounts)
	}()
}

// Close stops the history's sampler. The pages keep answering (with the
// history as it was).
func (d *Dashboard) Close() error {
	d.closeOnce.Do(func() {
		d.stopHistory()
		<-d.historyDone
	})
	return nil
}

// History is the dashboard's history (tests, and the JSON answer).
func (d *Dashboard) History() *history.History { return d.hist }

// apiHistory answers GET /api/history?res=s|m&kind=K&name=N (name may be
// repeated; none: every series of the kind) with JSON:
// {"res":"s","times":[unix ms...],"series":[{"kind":..,"name":..,"values":[..]}]},
// a NaN sample written as null.
func (d *Dashboard) apiHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	res := history.PerSecond
	if q.Get("res") == "m" {
		res = history.PerMinute
	}
	var keep func(history.Key) bool
	if names := q["name"]; len(names) > 0 {
		set := map[string]bool{}
		for _, n := range names {
			set[n] = true
		}
		keep = func(k history.Key) bool { return set[k.Name] }
	}
	f := d.hist.Query(res, q.Get("kind"), keep)
	b := make([]byte, 0, 64+len(f.Times)*(14+8*len(f.Series)))
	b = append(b, `{"res":"`...)
	if res == history.PerMinute {
		b = append(b, 'm')
	} else {
		b = append(b, 's')
	}
	b = append(b, `","times":[`...)
	for i, t := range f.Times {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, t, 10)
	}
	b = append(b, `],"series":[`...)
	for i, s := range f.Series {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"kind":`...)
		b = strconv.AppendQuote(b, s.Kind)
		b = append(b, `,"name":`...)
		b = strconv.AppendQuote(b, s.Name)
		b = append(b, `,"values":[`...)
		for j, v := range s.Values {
			if j > 0 {
				b = append(b, ',')
			}
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				b = append(b, "null"...)
			} else {
				b = strconv.AppendFloat(b, float64(v), 'g', 6, 32)
			}
		}
		b = append(b, "]}"...)
	}
	b = append(b, "]}"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// serveStatic serves the embedded files under /static/.
func (d *Dashboard) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	b, err := static.ReadFile(name)
	if err != nil || strings.Contains(name, "..") {
		http.NotFound(w, r)
		return
	}
	switch {
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "max-age=3600")
	http.ServeContent(w, r, name, startTime, strings.NewReader(string(b)))
}

// startTime is the embedded files' modification time.
var startTime = time.Now()
