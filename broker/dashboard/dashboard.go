// Package dashboard is the broker's built-in web dashboard: server-rendered
// pages (html/template, a little CSS) on the metrics listener's "/", for
// an operator who wants to look without writing code, with charts drawn in
// the browser by uPlot and the dashboard's own script, both embedded in
// the binary and served under /static/ (no other origin).
//
// Pages: the broker and its cluster (/: charts of the put and get rates,
// send latency percentiles and disk ratio), topics (/topics, /topic:
// queues, put TPS and its chart, backlog), consumer groups (/groups,
// /group: members, subscriptions, lag per queue, lag and consume rate
// charts), the broker group (/replication: members, roles, epochs,
// SyncStateSet and each slave's lag, from the controller client in
// controller mode, from the name server's table in classic mode), a
// message search by key, unique key or offset message id (/messages:
// properties, body, and the message's trail through the retry and
// dead-letter topics of the groups that consume it), and a message's trace
// (/trace: the 4.x clients' trace records in the trace topic).
//
// History: a history.History (package broker/history) of per-second and
// per-minute samples, fed by a sampler goroutine that reads, once a
// second, the counters the broker keeps anyway (readCounts); the charts
// read it as JSON from /api/history. Auto-refresh (dash.js): every few
// seconds the elements marked data-live are replaced by those of a fresh
// copy of the page and the charts reload.
//
// Actions (create or update a topic, reset a group's offsets to a time,
// resend a stored message to one consumer) take two steps: a GET of
// /confirm renders what will happen and a form that POSTs to /do. Nothing
// changes on a GET.
//
// # Security (invariants)
//
//   - Host: every request's Host names this listener (an IP address of the
//     machine, a localhost name, the machine's host name) or a name in
//     Options.Hosts; any other is refused with 403 saying how to allow it.
//     A page on another site that resolves its own name to this address
//     (DNS rebinding) sends its name as Host, so it reads and does nothing.
//   - A POST (/do, /login, /logout) whose Origin, or without one its
//     Referer, names another host is refused.
//   - A confirmation token authenticates, under a per-process secret
//     (HMAC-SHA256), the action, the value of every field the confirmation
//     page showed, the login it was shown to and its expiry (TokenTTL): /do
//     runs the action with exactly those values, each field given once, or
//     refuses it.
//   - With Options.Users (the broker checks credentials: ACL), a request
//     without a login is read-only; a login is an ACL user (name and
//     secret key) and starts a session (a random id in an HttpOnly,
//     SameSite=Strict cookie, Secure over TLS, ending after SessionTTL or
//     at logout); each action is allowed by Users.AuthorizeRequest with
//     the remoting request that makes the same change (its code and
//     header fields), at confirmation and again at /do. Failed logins are
//     limited per source address.
//
// Every number comes from the broker core's admin operations (the ones
// GET_CONSUME_STATS, GET_TOPIC_STATS_INFO, QUERY_MESSAGE and the rest
// answer with), so the pages agree with mqadmin and apogee-admin; the few
// things only the front end has (the name server's cluster table, a push to
// a consumer's connection, its runtime keys) come through Backend.
package dashboard

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/history"
	"github.com/apogeemq/apogee/internal/opauth"
	"github.com/apogeemq/apogee/protocol"
)

// Backend is what the dashboard reads and acts through: the broker core,
// and what only the front end knows. *broker.Broker implements it.
type Backend interface {
	// Core is the broker's core; its admin operations serve every page.
	Core() *core.Core
	// RuntimeInfo is GET_BROKER_RUNTIME_INFO's table.
	RuntimeInfo() map[string]string
	// ClusterInfo is the cluster as the embedded name server holds it.
	ClusterInfo() protocol.ClusterInfo
	// ConsumeMessageDirectly pushes a stored message (by offset message
	// id) to one consumer and returns its result (CONSUME_MESSAGE_DIRECTLY).
	ConsumeMessageDirectly(ctx context.Context, group, clientID, msgID string) (protocol.ConsumeMessageDirectlyResult, error)
	// ConsumerRunningInfo asks one consumer for the queues it holds
	// (GET_CONSUMER_RUNNING_INFO): the clients' rebalance.
	ConsumerRunningInfo(ctx context.Context, group, clientID string) (protocol.ConsumerRunningInfo, error)
	// ResetConsumerOffset moves a group's offsets of a topic to the first
	// message stored at or after timestampMs (-1: each queue's end) and
	// tells the group's live members.
	ResetConsumerOffset(topic, group string, timestampMs int64, force bool, queueID int32, offset int64) ([]core.QueueOffset, int, error)
}

// Options configure a Dashboard.
type Options struct {
	// Logger receives a line per action taken. Default slog.Default().
	Logger *slog.Logger
	// ActionTimeout bounds an action that waits for a client (a resend).
	// Default 10 s.
	ActionTimeout time.Duration
	// MemberTimeout bounds how long a group's page waits for its members
	// to say which queues they hold. Default 2 s.
	MemberTimeout time.Duration
	// Users, when set (a broker that checks its clients' credentials),
	// requires a login as one of its users for every action and allows
	// each as that user's policies allow the remoting request that makes
	// it; without a login the pages are read-only. Nil: no login, and
	// whoever reaches the listener may act.
	Users Users
	// Hosts are names (or IP addresses) the dashboard answers under besides
	// its own (an IP address of the machine, localhost names, the machine's
	// host name): the names operators reach it by, a proxy's name. An
	// entry "*.example.com" allows every name under example.com; "*" any
	// name (turns the check off).
	Hosts []string
	// HostsHint tells the operator how to allow a refused name, in the
	// 403 answer and the log ("NAME" is replaced by the name). Default
	// "add NAME to the dashboard's Options.Hosts".
	HostsHint string
	// TokenTTL is how long a confirmation stays valid. Default 10 min.
	TokenTTL time.Duration
	// SessionTTL is how long a login lasts. Default 8 h.
	SessionTTL time.Duration
	// Failures counts failed logins per source; a caller shares it with
	// its other logins (the broker's basic authentication of /metrics) so
	// that they are limited together. Default: the dashboard's own.
	Failures *opauth.Failures
	// Now is the clock of tokens and sessions (tests). Default time.Now.
	Now func() time.Time
	// History bounds the charts' samples (package history's defaults:
	// 900 per-second and 60 per-minute samples, 32 topics and 32 groups
	// named, the rest summed as "(other)").
	History history.Options
	// SampleInterval is how often the history reads the broker's counts.
	// Default 1 s.
	SampleInterval time.Duration
	// SendLatency, when set, reads the send requests' latency histogram
	// (bucket bounds in ms and the cumulative count of each bucket, one
	// more for +Inf): broker/metrics' RPCLatency.Buckets. Nil: no latency
	// series.
	SendLatency func() (bounds []float64, counts []uint64)
	// Controller, in controller mode, reads what the broker's controller
	// client knows of its group (the broker group page); nil in classic
	// mode.
	Controller func(ctx context.Context) (ControllerView, error)
	// TraceTopic is the topic the clients' message traces go to. Default
	// RMQ_SYS_TRACE_TOPIC (RocketMQ's default traceTopicName).
	TraceTopic string
}

// Dashboard serves the pages. It is an http.Handler; mount it at "/".
type Dashboard struct {
	b        Backend
	o        Options
	secret   [32]byte
	mux      *http.ServeMux
	tmpl     *template.Template
	hosts    *hostCheck
	sessions sessions
	failures *opauth.Failures

	hist        *history.History
	stopHistory context.CancelFunc
	historyDone chan struct{}
	closeOnce   sync.Once
}

// New returns a dashboard over b and starts its history's sampler (a
// goroutine reading b's counts every SampleInterval); Close stops it.
func New(b Backend, o Options) (*Dashboard, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ActionTimeout <= 0 {
		o.ActionTimeout = 10 * time.Second
	}
	if o.MemberTimeout <= 0 {
		o.MemberTimeout = 2 * time.Second
	}
	if o.TokenTTL <= 0 {
		o.TokenTTL = 10 * time.Minute
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 8 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Failures == nil {
		o.Failures = opauth.NewFailures()
	}
	if o.TraceTopic == "" {
		o.TraceTopic = DefaultTraceTopic
	}
	if o.HostsHint == "" {
		o.HostsHint = "add NAME to the dashboard's Options.Hosts"
	}
	hc, err := newHostCheck(o.Hosts)
	if err != nil {
		return nil, err
	}
	d := &Dashboard{b: b, o: o, mux: http.NewServeMux(), hosts: hc,
		sessions: sessions{m: map[string]session{}}, failures: o.Failures}
	if _, err := rand.Read(d.secret[:]); err != nil {
		return nil, fmt.Errorf("dashboard: secret: %w", err)
	}
	t, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	d.tmpl = t
	d.mux.HandleFunc("GET /{$}", d.page("overview", d.overview))
	d.mux.HandleFunc("GET /topics", d.page("topics", d.topics))
	d.mux.HandleFunc("GET /topic", d.page("topic", d.topic))
	d.mux.HandleFunc("GET /groups", d.page("groups", d.groups))
	d.mux.HandleFunc("GET /group", d.page("group", d.group))
	d.mux.HandleFunc("GET /messages", d.page("messages", d.messages))
	d.mux.HandleFunc("GET /replication", d.page("replication", d.replication))
	d.mux.HandleFunc("GET /trace", d.page("trace", d.traceView))
	d.mux.HandleFunc("GET /api/history", d.apiHistory)
	d.mux.HandleFunc("GET /static/", d.serveStatic)
	d.mux.HandleFunc("GET /confirm", d.page("confirm", d.confirm))
	d.mux.HandleFunc("POST /do", d.do)
	d.mux.HandleFunc("GET /login", d.page("login", d.loginPage))
	d.mux.HandleFunc("POST /login", d.doLogin)
	d.mux.HandleFunc("POST /logout", d.doLogout)
	d.hist = history.New(o.History)
	d.startHistory()
	return d, nil
}

// ServeHTTP implements http.Handler.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; form-action 'self'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !d.hosts.allowed(r) {
		d.refuseHost(w, r)
		return
	}
	d.mux.ServeHTTP(w, r)
}

// view is what every page's template gets: the broker's name, the page's
// data, an error to show instead when the page could not be built, and
// the login (Logins: the dashboard has them; User: who is logged in, with
// the token of the logout form).
type view struct {
	Broker, Cluster, Page string
	Now                   time.Time
	Data                  any
	Err                   string
	Logins                bool
	User, LogoutToken     string
	// SecWindow and MinWindow say how far back the charts' per-second
	// and per-minute samples go ("15 min", "1 h").
	SecWindow, MinWindow string
}

func (d *Dashboard) newView(r *http.Request, name string) view {
	o := d.b.Core().Options()
	ho := d.hist.Options()
	v := view{Broker: o.BrokerName, Cluster: o.ClusterName, Page: name, Now: time.Now(), Logins: d.o.Users != nil,
		SecWindow: span(time.Duration(ho.Seconds) * time.Second), MinWindow: span(time.Duration(ho.Minutes) * time.Minute)}
	if sid, user := d.login(r); sid != "" {
		v.User, v.LogoutToken = user, d.newToken("logout", sid, nil, nil)
	}
	return v
}

func (d *Dashboard) page(name string, build func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := d.newView(r, name)
		data, err := build(r)
		v.Data = data
		status := http.StatusOK
		var ref *refusal
		switch {
		case errors.As(err, &ref):
			v.Err = err.Error()
			status = http.StatusForbidden
		case err != nil:
			v.Err = err.Error()
			status = http.StatusBadRequest
		}
		d.render(w, status, name, v)
	}
}

func (d *Dashboard) render(w http.ResponseWriter, status int, name string, v view) {
	var sb strings.Builder
	if err := d.tmpl.ExecuteTemplate(&sb, name, v); err != nil {
		d.o.Logger.Error("dashboard: render", "page", name, "err", err)
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(sb.String()))
}

// formatMs prints a ms timestamp as local time (empty for 0).
func formatMs(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05.000")
}

// span prints a chart's reach: "15 min", "1 h", "90 s".
func span(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return fmt.Sprintf("%d s", d/time.Second)
}
