//go:build !linux

package core

// memoryWindow is how far behind the commit log's end a message still counts
// as in memory: RocketMQ uses 40% of physical RAM; without a portable way to
// read it, assume 8 GiB of RAM.
func memoryWindow() int64 { return defaultMemoryWindow }
