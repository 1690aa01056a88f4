//go:build race

package longpoll

const raceEnabled = true
