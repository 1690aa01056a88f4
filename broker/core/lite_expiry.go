package core

import (
	"time"
)

// Expiry of idle lite topics (RocketMQ's AbstractLiteLifecycleManager):
// after LiteMinTTL from the start ("base protection for restart"), every
// LiteTTLCheckInterval, each LITE parent with lite.topic.expiration > 0
// (minutes) loses the lite topics whose last message was stored longer ago
// than both LiteMinTTL and that expiration (consumer lag is not
// considered, as in RocketMQ). The store deletes the lite topic (entries,
// offsets); the registry forgets its subscriptions and FIFO state without
// telling the clients (RocketMQ's cleanSubscription(lmq, false)). The
// same loop drops lite clients whose subscriptions were not refreshed for
// 3 minutes (liteSubscriptionCheckTimeoutMills).

// Defaults of the lite expiry.
const (
	defaultLiteMinTTL           = 15 * time.Minute
	defaultLiteTTLCheckInterval = 120 * time.Second
	liteClientCheckInterval     = 30 * time.Second
)

// liteMaintain runs the lite expiry and the client check until Shutdown.
func (c *Core) liteMaintain() {
	defer c.wg.Done()
	minTTL := c.opts.LiteMinTTL
	if minTTL <= 0 {
		minTTL = defaultLiteMinTTL
	}
	every := c.opts.LiteTTLCheckInterval
	if every <= 0 {
		every = defaultLiteTTLCheckInterval
	}
	clients := time.NewTicker(min(every, liteClientCheckInterval))
	defer clients.Stop()
	first := time.NewTimer(minTTL)
	defer first.Stop()
	var scan <-chan time.Time
	for {
		select {
		case <-c.stop:
			return
		case <-clients.C:
			for _, id := range c.lite.reg.Expire(time.Now()) {
				c.opts.Logger.Info("broker: a lite client's subscriptions were not refreshed for 3 minutes: dropped", "client", id)
			}
		case <-first.C:
			t := time.NewTicker(every)
			defer t.Stop()
			scan = t.C
			c.expireLite(time.Now(), minTTL)
		case <-scan:
			c.expireLite(time.Now(), minTTL)
		}
	}
}

// expireLite deletes the idle lite topics of every LITE parent with an
// expiration, and returns how many it deleted.
func (c *Core) expireLite(now time.Time, minTTL time.Duration) int {
	total := 0
	cfgs, _ := c.topics.snapshot()
	for _, cfg := range cfgs {
		t := newTopicEntry(cfg)
		if !isLiteParent(t) {
			continue
		}
		ttlMin := liteExpiration(cfg)
		if ttlMin <= 0 {
			continue
		}
		ttl := max(time.Duration(ttlMin)*time.Minute, minTTL)
		parent := t.name
		n, err := c.store.ExpireLite(parent, now.Add(-ttl).UnixMilli(), func(l string) {
			c.lite.reg.ForgetLite(parent, l)
		})
		if err != nil {
			c.opts.Logger.Error("broker: the expiry of idle lite topics failed; it is tried again at the next scan "+
				"(check the store's disk and log)", "parent", parent, "err", err)
			continue
		}
		if n > 0 {
			c.opts.Logger.Info("broker: idle lite topics expired", "parent", parent, "deleted", n, "ttl", ttl)
		}
		total += n
	}
	return total
}
