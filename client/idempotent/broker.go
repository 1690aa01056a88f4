package idempotent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Defaults of the BrokerStore's options.
const (
	DefaultBrokerRequestTimeout    = 3 * time.Second
	DefaultBrokerVisibilityTimeout = 3 * time.Second
	DefaultBrokerRouteRefresh      = 30 * time.Second
	// BrokerTopicPrefix starts the default topic of a group's BrokerStore.
	BrokerTopicPrefix = "%IDEMPOTENT%"
	// DefaultBrokerProducerGroup is the producer group the store's producer joins.
	DefaultBrokerProducerGroup = "IDEMPOTENT_PRODUCER"
)

const (
	// queryBatch is QUERY_MESSAGE's maxNum: what Apogee and Java brokers return at
	// most per query (maxMsgsNumBatch).
	queryBatch = 64
	// maxQueryPages bounds how many queries a read makes per broker, paging back
	// through a key's history: at most 1,024 records of one key are read.
	maxQueryPages = 16
)

// BrokerStore is a Store kept by the message brokers themselves, so that the
// consumers of a group in any number of processes share it with no extra server.
// Every state change of a key (begin, renew, done, release) is sent as a small
// message (a record) to the store's topic, with the key as its KEYS (see
// indexKey), through an ordinary producer; the broker indexes it in its hash
// index. A key's state is read back with QUERY_MESSAGE (request code 12), which
// returns the key's records newest first, and folded: records are replayed in
// the broker's log order, each one applied only if it was a legal transition
// when the broker stored it (a begin while another owner's lease was live is
// ignored, so is a renew, done or release by an owner that did not hold the key).
// Leases and TTLs are measured from the broker's store timestamp of the record.
//
// TryBegin reads the key; if nobody holds it, it sends a begin record, then reads
// the key again until its own record is in the index (at most the visibility
// timeout; the broker indexes records in log order, so every record stored
// before its own is then visible too), and it holds the key if its begin was
// legal at its place in the log. Renew reads the key and sends a renew record if
// the owner still holds it. Done and Release send their record without reading:
// they cannot report ErrNotOwner, but a record from a non-holder is ignored by
// every reader.
//
// # Consistency and its limits
//
//   - Two processes racing on one key: both may find it absent and both send a
//     begin, but the broker's log puts one first, and each re-reads until its own
//     record is indexed, so both see that order and exactly one holds the key.
//     This holds while a key's records are on one broker: the store's producer
//     sends them all to the queue the key hashes to, so they leave one broker
//     only when a send is retried elsewhere after a failure or the topic's
//     queues change. Records of several brokers are merged by store timestamp,
//     and two begins within the clock skew between those brokers can both win.
//   - The index is eventually consistent: a record is queryable a moment after
//     its send is acknowledged. Done is not waited for, so a duplicate arriving
//     within that moment finds the key still processing and is retried later
//     (never run twice). If the begin record does not become visible within the
//     visibility timeout (the index lags, the broker is unreachable), TryBegin
//     sends a release and fails with ErrNotVisible, and the message is retried.
//   - Expiry compares the broker's store timestamps with this host's clock: a
//     skew between them lengthens or shortens leases and TTLs by as much.
//   - A read pages back through at most 1,024 records of a key (16 queries of
//     64 per broker); a key with a longer history (a listener running for
//     thousands of renewal intervals) is folded from its newest records only.
//   - Records live as long as the broker keeps the topic's messages (72 h by
//     default): a done TTL beyond the retention is cut to it. Give the store's
//     topic a retention that covers the Guard's DoneTTL.
//   - Each TryBegin costs two or three queries and one send; Done, Release and
//     Renew one send each (Renew one query too). It suits consumers of up to a
//     few thousand messages per second; use a Redis store beyond.
//
// A BrokerStore holds the keys of one consumer group (one topic): give each
// group its own.
type BrokerStore struct {
	topic      string
	nameserver []string
	timeout    time.Duration
	visibility time.Duration
	history    time.Duration
	refresh    time.Duration
	log        *slog.Logger

	producer *client.Producer
	pool     *remoting.Pool
	closed   atomic.Bool
	nsNext   atomic.Uint32

	mu      sync.Mutex
	brokers map[string]string // broker name → master address, for the topic
	routeAt time.Time         // when brokers was last fetched
}

type brokerConfig struct {
	topic        string
	nameServers  []string
	timeout      time.Duration
	visibility   time.Duration
	history      time.Duration
	refresh      time.Duration
	producerOpts []client.ProducerOpt
	log          *slog.Logger
	creds        auth.Credentials
	tls          *tls.Config
}

// BrokerOption configures a BrokerStore.
type BrokerOption func(*brokerConfig)

// BrokerNameServer sets the name server addresses (each argument may be a list
// separated by ';'), used to find the brokers of the store's topic and by the
// store's producer. An Apogee broker answers name-server requests on its own
// address. Default: the NAMESRV_ADDR environment variable. Required one way or
// the other.
func BrokerNameServer(addrs ...string) BrokerOption {
	return func(c *brokerConfig) {
		c.nameServers = nil
		for _, a := range addrs {
			c.nameServers = append(c.nameServers, splitAddrs(a)...)
		}
	}
}

// BrokerTopic sets the topic the records go to. Default "%IDEMPOTENT%<group>".
// It is created on first use by the broker's auto-create (or create it with the
// retention and queues you want).
func BrokerTopic(topic string) BrokerOption { return func(c *brokerConfig) { c.topic = topic } }

// BrokerRequestTimeout bounds each query and route request, and each send (the
// producer's SendTimeout). Default 3 s.
func BrokerRequestTimeout(d time.Duration) BrokerOption {
	return func(c *brokerConfig) { c.timeout = d }
}

// BrokerVisibilityTimeout bounds how long TryBegin waits for its begin record to
// appear in the broker's index. Default 3 s.
func BrokerVisibilityTimeout(d time.Duration) BrokerOption {
	return func(c *brokerConfig) { c.visibility = d }
}

// BrokerHistory limits how far back reads look (QUERY_MESSAGE's beginTimestamp):
// records older than this are ignored. It must exceed the Guard's DoneTTL plus its
// lease. Default 0: everything the broker still keeps.
func BrokerHistory(d time.Duration) BrokerOption { return func(c *brokerConfig) { c.history = d } }

// BrokerRouteRefresh sets how often the topic's brokers are looked up again.
// Default 30 s (and at once when a record lands on a broker not known yet).
func BrokerRouteRefresh(d time.Duration) BrokerOption {
	return func(c *brokerConfig) { c.refresh = d }
}

// BrokerProducerOptions passes options to the store's producer (after the
// store's own: NameServer, ProducerGroup "IDEMPOTENT_PRODUCER", SendTimeout).
// The producer shares the client instance of the process's other clients with
// the same client ID, so give it the same instance-level options they have, or
// its own InstanceName. The store always sets Selector(client.HashSelector())
// and CompressOver(-1) last.
func BrokerProducerOptions(opts ...client.ProducerOpt) BrokerOption {
	return func(c *brokerConfig) { c.producerOpts = append(c.producerOpts, opts...) }
}

// BrokerCredentials signs every request of the store, its producer's and
// its queries', with RocketMQ's AccessKey and Signature (client.Credentials),
// for a broker with access control on: the store's producer needs Pub on
// its topic, its queries Sub or Get on it. Default: unsigned.
func BrokerCredentials(c auth.Credentials) BrokerOption {
	return func(cfg *brokerConfig) { cfg.creds = c }
}

// BrokerTLS makes the store's connections, its producer's and its
// queries', TLS connections with this configuration (client.TLS). Default:
// plain TCP.
func BrokerTLS(t *tls.Config) BrokerOption { return func(cfg *brokerConfig) { cfg.tls = t } }

// BrokerLogger sets the logger. Default slog.Default().
func BrokerLogger(l *slog.Logger) BrokerOption { return func(c *brokerConfig) { c.log = l } }

// NewBrokerStore returns a BrokerStore for the consumer group group, with its
// own producer (started at once) and its own connections for queries. Close it
// when done.
func NewBrokerStore(group string, opts ...BrokerOption) (*BrokerStore, error) {
	cfg := brokerConfig{
		timeout:    DefaultBrokerRequestTimeout,
		visibility: DefaultBrokerVisibilityTimeout,
		refresh:    DefaultBrokerRouteRefresh,
	}
	for _, o := range opts {
		o(&cfg)
	}
	var errs []string
	if cfg.topic == "" {
		if group == "" {
			errs = append(errs, "a group (or BrokerTopic) is required")
		}
		cfg.topic = BrokerTopicPrefix + group
	}
	if !validTopic(cfg.topic) {
		errs = append(errs, fmt.Sprintf("topic %q is not a valid topic name (^[%%|a-zA-Z0-9_-]{1,127}$)", cfg.topic))
	}
	if len(cfg.nameServers) == 0 {
		cfg.nameServers = splitAddrs(os.Getenv("NAMESRV_ADDR"))
	}
	if len(cfg.nameServers) == 0 {
		errs = append(errs, "no name server (BrokerNameServer or NAMESRV_ADDR)")
	}
	if cfg.timeout <= 0 || cfg.visibility <= 0 || cfg.refresh <= 0 {
		errs = append(errs, "BrokerRequestTimeout, BrokerVisibilityTimeout and BrokerRouteRefresh must be positive")
	}
	if cfg.history < 0 {
		errs = append(errs, "BrokerHistory must not be negative")
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	popts := []client.ProducerOpt{
		client.NameServer(cfg.nameServers...),
		client.ProducerGroup(DefaultBrokerProducerGroup),
		client.SendTimeout(cfg.timeout),
	}
	if !cfg.creds.IsEmpty() {
		popts = append(popts, client.Credentials(cfg.creds))
	}
	if cfg.tls != nil {
		popts = append(popts, client.TLS(cfg.tls))
	}
	popts = append(popts, cfg.producerOpts...)
	popts = append(popts, client.Selector(client.HashSelector()), client.CompressOver(-1))
	p, err := client.NewProducer(popts...)
	if err != nil {
		return nil, fmt.Errorf("idempotent: broker store producer: %w", err)
	}
	return &BrokerStore{
		topic: cfg.topic, nameserver: cfg.nameServers, timeout: cfg.timeout, visibility: cfg.visibility,
		history: cfg.history, refresh: cfg.refresh, log: cfg.log,
		producer: p,
		pool:     remoting.NewPool(cfg.poolOptions()),
		brokers:  map[string]string{},
	}, nil
}

// poolOptions are the options of the store's own connections (queries).
func (cfg *brokerConfig) poolOptions() *remoting.ClientOptions {
	o := &remoting.ClientOptions{TLS: cfg.tls}
	if !cfg.creds.IsEmpty() {
		o.Signer = auth.NewSigner(cfg.creds)
	}
	return o
}

// Topic returns the topic the store's records go to.
func (s *BrokerStore) Topic() string { return s.topic }

// Close closes the store's producer and connections. Calls after Close fail
// with ErrClosed.
func (s *BrokerStore) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	err := s.producer.Close(ctx)
	s.pool.Close()
	return err
}

// TryBegin implements Store.
func (s *BrokerStore) TryBegin(ctx context.Context, key, owner string, lease time.Duration) (State, error) {
	if err := s.check(key, owner); err != nil {
		return 0, err
	}
	es, err := s.read(ctx, key)
	if err != nil {
		return 0, err
	}
	f := fold(es)
	if st := f.at(time.Now().UnixMilli()); !st.Acquired() {
		return st, nil
	}
	id, err := s.write(ctx, opBegin, key, owner, lease)
	if err != nil {
		return 0, err
	}
	// Read until the begin record is indexed, then judge it at its place in the log.
	wait := time.Millisecond
	deadline := time.Now().Add(s.visibility)
	for {
		es, err = s.read(ctx, key)
		if err == nil {
			for i := range es {
				if es[i].id != id {
					continue
				}
				prior := fold(es[:i])
				if prior.live(es[i].ts) {
					return prior.kind, nil
				}
				if prior.kind == StateProcessing {
					return StateExpired, nil
				}
				return StateAbsent, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		wait = min(2*wait, 25*time.Millisecond)
	}
	// Unconfirmed: withdraw the begin (if it was legal, this releases it).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	if _, rerr := s.write(rctx, opRelease, key, owner, 0); rerr != nil {
		s.log.Warn("idempotent: withdrawing an unconfirmed begin failed; the key stays blocked until its lease expires", "key", key, "err", rerr)
	}
	if err == nil {
		err = ctx.Err()
	}
	return 0, fmt.Errorf("idempotent: begin %q: %w (waited %v): %v", key, ErrNotVisible, s.visibility, err)
}

// Renew implements Store: it reads the key and sends a renew record if owner
// still holds it under a live lease.
func (s *BrokerStore) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	if err := s.check(key, owner); err != nil {
		return err
	}
	es, err := s.read(ctx, key)
	if err != nil {
		return err
	}
	f := fold(es)
	if f.kind != StateProcessing || f.owner != owner || f.expires <= time.Now().UnixMilli() {
		return fmt.Errorf("idempotent: renew %q: %w", key, ErrNotOwner)
	}
	_, err = s.write(ctx, opRenew, key, owner, lease)
	return err
}

// Done implements Store. It sends a done record without reading the key, so it
// never reports ErrNotOwner; a done record by a non-holder is ignored by readers.
func (s *BrokerStore) Done(ctx context.Context, key, owner string, ttl time.Duration) error {
	if err := s.check(key, owner); err != nil {
		return err
	}
	_, err := s.write(ctx, opDone, key, owner, ttl)
	return err
}

// Release implements Store. It sends a release record without reading the key, so
// it never reports ErrNotOwner; a release by a non-holder is ignored by readers.
func (s *BrokerStore) Release(ctx context.Context, key, owner string) error {
	if err := s.check(key, owner); err != nil {
		return err
	}
	_, err := s.write(ctx, opRelease, key, owner, 0)
	return err
}

// Lookup reads key and returns its state as TryBegin would find it now, its
// owner, and when its lease or TTL ends (by the broker's clock), without changing
// anything.
func (s *BrokerStore) Lookup(ctx context.Context, key string) (State, string, time.Time, error) {
	if err := s.check(key, "-"); err != nil {
		return 0, "", time.Time{}, err
	}
	es, err := s.read(ctx, key)
	if err != nil {
		return 0, "", time.Time{}, err
	}
	f := fold(es)
	st := f.at(time.Now().UnixMilli())
	if f.kind == StateAbsent {
		return st, "", time.Time{}, nil
	}
	return st, f.owner, time.UnixMilli(f.expires), nil
}

func (s *BrokerStore) check(key, owner string) error {
	switch {
	case s.closed.Load():
		return ErrClosed
	case key == "" || len(key) > MaxKeyLen:
		return fmt.Errorf("idempotent: key of %d bytes (1..%d): %w", len(key), MaxKeyLen, ErrConfig)
	case owner == "" || len(owner) > MaxOwnerLen:
		return fmt.Errorf("idempotent: owner of %d bytes (1..%d): %w", len(owner), MaxOwnerLen, ErrConfig)
	}
	return nil
}

// write sends one record and returns its message id (UNIQ_KEY).
func (s *BrokerStore) write(ctx context.Context, o op, key, owner string, d time.Duration) (string, error) {
	r := record{op: o, dur: d.Milliseconds(), owner: []byte(owner), key: []byte(key)}
	ik := indexKey(key)
	m := &client.Message{
		Topic: s.topic, Body: appendRecord(nil, &r), Tags: o.String(),
		Keys: []string{ik}, ShardingKey: ik,
	}
	res, err := s.producer.SendSync(ctx, m)
	if err != nil {
		return "", fmt.Errorf("idempotent: %s %q: %w", o, key, err)
	}
	s.learnBroker(ctx, res.Queue.BrokerName)
	return res.MsgID(), nil
}

// read returns key's records, in log order, from every broker of the topic.
func (s *BrokerStore) read(ctx context.Context, key string) ([]entry, error) {
	brokers, err := s.topicBrokers(ctx, false)
	if err != nil {
		return nil, err
	}
	ik := indexKey(key)
	var es []entry
	for name, addr := range brokers {
		if es, err = s.readBroker(ctx, addr, key, ik, es); err != nil {
			s.forgetRoute()
			return nil, fmt.Errorf("idempotent: read %q from %s (%s): %w", key, name, addr, err)
		}
	}
	return orderEntries(es), nil
}

// readBroker appends key's records on the broker at addr to es, paging back from
// the newest.
func (s *BrokerStore) readBroker(ctx context.Context, addr, key, ik string, es []entry) ([]entry, error) {
	begin := int64(0)
	if s.history > 0 {
		begin = time.Now().Add(-s.history).UnixMilli()
	}
	end := time.Now().Add(24 * time.Hour).UnixMilli()
	for page := 0; page < maxQueryPages; page++ {
		req := new(protocol.Command)
		req.InitRequest(protocol.ReqQueryMessage, 0)
		req.SerializeType = protocol.SerializeRocketMQ
		(&protocol.QueryMessageRequest{Topic: s.topic, Key: ik, MaxNum: queryBatch, BeginTimestamp: begin, EndTimestamp: end}).Encode(&req.Ext)
		resp, err := s.invoke(ctx, addr, req)
		if err != nil {
			return es, err
		}
		switch resp.Code {
		case protocol.RespSuccess:
		case protocol.RespQueryNotFound, protocol.RespTopicNotExist:
			return es, nil
		default:
			return es, fmt.Errorf("QUERY_MESSAGE answered %d: %s", resp.Code, resp.Remark)
		}
		n := 0
		oldest := end
		err = message.ForEachRecord(resp.Body, false, func(v message.View) error {
			n++
			oldest = min(oldest, v.StoreTimestamp())
			if v.SysFlag()&message.FlagCompressed != 0 {
				return nil
			}
			r, err := decodeRecord(v.Body())
			if err != nil || string(r.key) != key {
				return nil // another message under the same index key
			}
			es = append(es, entry{
				op: r.op, dur: r.dur, owner: string(r.owner), ts: v.StoreTimestamp(),
				host: string(v.StoreHostBytes()), off: v.PhysicalOffset(), id: string(v.UniqKey()),
			})
			return nil
		})
		if err != nil {
			return es, err
		}
		// A full page may have older records behind it: query again up to the
		// oldest timestamp seen (inclusive; duplicates are removed by offset).
		if n < queryBatch || oldest <= begin || (page > 0 && oldest == end) {
			return es, nil
		}
		end = oldest
	}
	return es, nil
}

func (s *BrokerStore) invoke(ctx context.Context, addr string, req *protocol.Command) (*protocol.Command, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.pool.Invoke(ctx, addr, req)
}

// topicBrokers returns the topic's brokers (name → master address), from the
// cached route unless it is older than the refresh interval or force is set. A
// topic with no route yet has no brokers (and no records).
func (s *BrokerStore) topicBrokers(ctx context.Context, force bool) (map[string]string, error) {
	s.mu.Lock()
	fresh := !force && !s.routeAt.IsZero() && time.Since(s.routeAt) < s.refresh
	brokers := s.brokers
	s.mu.Unlock()
	if fresh {
		return brokers, nil
	}
	rd, err := s.fetchRoute(ctx, s.topic)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rd == nil {
		// No route yet: keep the brokers learnt from sends.
		for k, v := range s.brokers {
			m[k] = v
		}
	} else {
		addrs := masters(rd)
		for _, q := range rd.QueueDatas {
			if a := addrs[q.BrokerName]; a != "" {
				m[q.BrokerName] = a
			}
		}
	}
	s.brokers, s.routeAt = m, time.Now()
	return m, nil
}

func masters(rd *protocol.TopicRouteData) map[string]string {
	m := map[string]string{}
	for _, b := range rd.BrokerDatas {
		if a := b.BrokerAddrs[0]; a != "" {
			m[b.BrokerName] = a
		}
	}
	return m
}

// learnBroker makes sure the broker a record was stored on is read from: when its
// name is not known, the route is fetched again, and if the topic has no route
// yet (a name server that learns of auto-created topics late), the broker's
// address is taken from the route of the auto-create topic TBW102.
func (s *BrokerStore) learnBroker(ctx context.Context, name string) {
	s.mu.Lock()
	_, known := s.brokers[name]
	s.mu.Unlock()
	if known || name == "" {
		return
	}
	if brokers, err := s.topicBrokers(ctx, true); err == nil {
		if _, ok := brokers[name]; ok {
			return
		}
	}
	rd, err := s.fetchRoute(ctx, client.DefaultCreateTopicKey)
	if err != nil || rd == nil {
		s.log.Warn("idempotent: cannot find the address of the broker a record went to", "broker", name, "err", err)
		return
	}
	if a := masters(rd)[name]; a != "" {
		s.mu.Lock()
		m := make(map[string]string, len(s.brokers)+1)
		for k, v := range s.brokers {
			m[k] = v
		}
		m[name] = a
		s.brokers = m
		s.mu.Unlock()
	}
}

func (s *BrokerStore) forgetRoute() {
	s.mu.Lock()
	s.routeAt = time.Time{}
	s.mu.Unlock()
}

// fetchRoute asks the name servers for topic's route, trying each in turn from
// the next one round robin; a topic without a route gives nil.
func (s *BrokerStore) fetchRoute(ctx context.Context, topic string) (*protocol.TopicRouteData, error) {
	start := int(s.nsNext.Add(1))
	var last error
	for i := range s.nameserver {
		addr := s.nameserver[(start+i)%len(s.nameserver)]
		req := new(protocol.Command)
		req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
		req.SerializeType = protocol.SerializeRocketMQ
		(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
		resp, err := s.invoke(ctx, addr, req)
		if err != nil {
			last = err
			continue
		}
		switch resp.Code {
		case protocol.RespSuccess:
		case protocol.RespTopicNotExist:
			return nil, nil
		default:
			return nil, fmt.Errorf("idempotent: route of %q from %s: code %d: %s", topic, addr, resp.Code, resp.Remark)
		}
		var rd protocol.TopicRouteData
		if err := rd.Decode(resp.Body); err != nil {
			return nil, fmt.Errorf("idempotent: route of %q from %s: %w", topic, addr, err)
		}
		return &rd, nil
	}
	if last == nil {
		last = errors.New("no name server")
	}
	return nil, fmt.Errorf("idempotent: route of %q: %w", topic, last)
}

func splitAddrs(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// validTopic checks a topic name as brokers do: ^[%|a-zA-Z0-9_-]+$, at most 127
// characters.
func validTopic(t string) bool {
	if t == "" || len(t) > 127 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '%', c == '|', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
