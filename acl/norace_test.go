//go:build !race

package acl

const raceEnabled = false
