//go:build race

package interop

// raceEnabled reports whether the race detector is on; some client paths
// race inside the client itself and are skipped under it.
const raceEnabled = true
