// Package importgraph holds the test that keeps Apogee's import graph the one
// the design's package table allows (../shared/design.md). It has no code of
// its own: the test lists every package's imports with `go list` and rejects
// any internal edge the table does not name.
package importgraph
