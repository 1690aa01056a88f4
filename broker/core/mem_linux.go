package core

import "syscall"

// memoryWindow is how far behind the commit log's end a message still counts
// as in memory: 40% of physical RAM (RocketMQ's accessMessageInMemoryMaxRatio).
func memoryWindow() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return defaultMemoryWindow
	}
	return int64(uint64(si.Totalram) * uint64(si.Unit) * 40 / 100)
}
