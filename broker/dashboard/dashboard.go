// Package dashboard is the broker's built-in web dashboard: server-rendered
// pages (html/template, a little CSS, no JavaScript) on the metrics
// listener's "/", for an operator who wants to look without writing code.
//
// Pages: the broker and its cluster (/), topics (/topics, /topic: queues,
// put TPS, backlog), consumer groups (/groups, /group: members,
// subscriptions, lag per queue), and a message search by key, unique key
// or offset message id (/messages: properties, body, and the message's
// trail through the retry and dead-letter topics of the groups that
// consume it).
//
// Actions (create or update a topic, reset a group's offsets to a time,
// resend a stored message to one consumer) take two steps: a GET of
// /confirm renders what will happen and a form that POSTs to /do with a
// CSRF token (an HMAC of the action under a per-process secret and the
// hour, valid for two hours); /do refuses anything else, and a request
// whose Origin header names another host. Nothing changes on a GET.
//
// Every number comes from the broker core's admin operations (the ones
// GET_CONSUME_STATS, GET_TOPIC_STATS_INFO, QUERY_MESSAGE and the rest
// answer with), so the pages agree with mqadmin and apogee-admin; the few
// things only the front end has (the name server's cluster table, a push to
// a consumer's connection, its runtime keys) come through Backend.
package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/broker/core"
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
	// ReadOnly refuses every action (the pages stay): the dashboard has no
	// login, so a broker that authenticates its clients (ACLs) must not
	// let its HTTP listener change what they may not. Default false.
	ReadOnly bool
}

// Dashboard serves the pages. It is an http.Handler; mount it at "/".
type Dashboard struct {
	b      Backend
	o      Options
	secret [32]byte
	mux    *http.ServeMux
	tmpl   *template.Template
}

// New returns a dashboard over b.
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
	d := &Dashboard{b: b, o: o, mux: http.NewServeMux()}
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
	d.mux.HandleFunc("GET /confirm", d.page("confirm", d.confirm))
	d.mux.HandleFunc("POST /do", d.do)
	return d, nil
}

// ServeHTTP implements http.Handler.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	d.mux.ServeHTTP(w, r)
}

// view is what every page's template gets: the broker's name, the page's
// data, and an error to show instead when the page could not be built.
type view struct {
	Broker, Cluster, Page string
	Now                   time.Time
	Data                  any
	Err                   string
}

func (d *Dashboard) page(name string, build func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o := d.b.Core().Options()
		v := view{Broker: o.BrokerName, Cluster: o.ClusterName, Page: name, Now: time.Now()}
		data, err := build(r)
		v.Data = data
		status := http.StatusOK
		if err != nil {
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

// The CSRF token: HMAC-SHA256 over the action and an hour number, so a
// token is good for the hour it was made and the next.

func (d *Dashboard) token(action string, hour int64) string {
	m := hmac.New(sha256.New, d.secret[:])
	fmt.Fprintf(m, "%s\x00%d", action, hour)
	return strconv.FormatInt(hour, 10) + "." + hex.EncodeToString(m.Sum(nil))
}

func (d *Dashboard) newToken(action string) string {
	return d.token(action, time.Now().Unix()/3600)
}

func (d *Dashboard) validToken(action, tok string) bool {
	hs, _, ok := strings.Cut(tok, ".")
	if !ok {
		return false
	}
	hour, err := strconv.ParseInt(hs, 10, 64)
	if err != nil {
		return false
	}
	now := time.Now().Unix() / 3600
	if hour != now && hour != now-1 {
		return false
	}
	return hmac.Equal([]byte(d.token(action, hour)), []byte(tok))
}

// sameOrigin rejects a POST a browser sent from another site: its Origin
// (when the browser sends one) must name this host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return o == ""
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// formatMs prints a ms timestamp as local time (empty for 0).
func formatMs(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05.000")
}
