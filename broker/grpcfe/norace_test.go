//go:build !race

package grpcfe

const raceEnabled = false
