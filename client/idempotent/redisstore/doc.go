// Package redisstore is an idempotent.Store kept in Redis (github.com/redis/go-redis/v9),
// for consumers of one group spread over many processes that already run Redis:
// every operation is one or two round trips and atomic in Redis (SET NX PX, and
// Lua scripts that compare the owner), so it is strongly consistent where the
// broker-backed store is only eventually so, and it is cheaper per message.
//
// It is a Go module of its own, so that Apogee's core module does not depend on
// go-redis. Its tests start a real redis-server (Debian package redis-server)
// on a free port and fail when the binary is missing.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	g, err := idempotent.New(redisstore.New(rdb, "apogee:idem:billing:"))
//	...
//	client.WithConcurrentListener(g.Concurrent(listener))
//
// A Store is safe for concurrent use (as its go-redis client is). Redis
// persistence and replication decide what survives a Redis failure: a key lost
// with a failover or a restart without persistence is absent again, so its next
// delivery runs.
package redisstore
