module github.com/apogeemq/apogee/client/idempotent/redisstore

go 1.26.0

require (
	github.com/apogeemq/apogee v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/apogeemq/apogee => ../../..
