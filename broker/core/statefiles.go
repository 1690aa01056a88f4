package core

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// The state files: DataDir/ConfigDir holds the tables' files (RocketMQ's
// names and shapes), PopStateFile and the features' own (delay.StateFile,
// timerwheel.StateFile, txn.CheckpointFileName).
const (
	ConfigDir             = "config"
	TopicsFile            = "topics.json"
	SubscriptionGroupFile = "subscriptionGroup.json"
	ConsumerOffsetFile    = "consumerOffset.json"
)

// State files. Every JSON state file under DataDir/config (topics.json,
// subscriptionGroup.json, consumerOffset.json, delayOffset.json,
// timerCheckpoint.json, transactionCheckpoint.json, popState.json) is
// written by Options.WriteConfigFile (default: writeStateFile on
// Options.FS) and read by loadStateFile (on Options.FS):
//
//   - A write replaces the file whole and keeps the version it replaces as
//     FILE.bak (as RocketMQ does), so at any moment FILE holds the last
//     write and FILE.bak the one before it.
//   - A load that finds FILE missing or unparsable while FILE.bak parses
//     uses FILE.bak, logs a WARN naming both, and renames a damaged FILE to
//     FILE.damaged (so that the next write does not keep it as the .bak;
//     the next write then creates FILE again). When neither parses the
//     core refuses to start (New fails) with an error naming both files.
const (
	BakSuffix     = durable.BakSuffix
	damagedSuffix = durable.DamagedSuffix
)

// WriteConfigFile replaces path with data on the operating system's file
// system (writeStateFile on vfs.Default), as Options.WriteConfigFile does by
// default on Options.FS.
func WriteConfigFile(path string, data []byte) error {
	return writeStateFile(vfs.Default, path, data)
}

// writeStateFile replaces path with data through fsys so that a crash
// leaves either the old or the new contents, and keeps the old contents as
// path.bak (durable.WriteFile with durable.Backup): write a temporary file
// in the same directory and fsync it, make the current file path.bak (a
// hard link renamed into place, or a synced copy), rename the temporary
// file over path, fsync the directory. A crash at any point leaves path
// complete (old or new) and path.bak complete (the version before path, or
// the one before that); once it returned nil, path holds data. The file is
// created 0600, as os.CreateTemp made it before.
func writeStateFile(fsys vfs.FS, path string, data []byte) error {
	if err := durable.WriteFile(fsys, path, data, durable.Backup(BakSuffix), durable.Perm(0o600)); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	return nil
}

// loadStateFile reads the state file at path through fsys and parses it,
// falling back to its previous version (path.bak, see writeStateFile) with
// a WARN when path is missing or does not parse (durable.LoadWithBackup).
func loadStateFile[T any](fsys vfs.FS, path string, log *slog.Logger, parse func([]byte) (T, error)) (v T, found, fellBack bool, err error) {
	v, found, fellBack, err = durable.LoadWithBackup(fsys, path, log, parse)
	if err != nil {
		err = fmt.Errorf("broker: %w", err)
	}
	return v, found, fellBack, err
}

// stateWriter writes one state file on a goroutine of its own, so that the
// requests that change the state (a topic auto-created by a send, a group
// created by a heartbeat) never wait for the file. request asks for a write
// and returns at once; sync asks for one and waits until a write that
// started after the call has finished. Requests coalesce: a write starts
// when asked, but no sooner than gap after the previous one ended, where
// gap is max(stateWriteGap, 10 × the previous write's duration) (so the
// writer's share of a CPU stays under a tenth however large the file), or
// at once when someone waits in sync. A failed write is logged through
// onError and retried with a gap that doubles up to stateRetryMax.
//
// So a change requested at time t is on disk by t + gap + the duration of
// two writes (one may be in progress at t). What a crash before then loses
// is that change; a clean Shutdown (finish) writes everything.
type stateWriter struct {
	persist func() error // writes the state if it changed since the last successful write
	onError func(error)
	minGap  time.Duration // stateWriteGap (tests change it before run)

	kick  chan struct{} // cap 1: a write was requested
	hurry chan struct{} // cap 1: someone waits for the next write

	mu   sync.Mutex
	next *writeRound // completed by the next write to start; nil when no one waits
	done bool        // finish ran: sync writes itself
}

// writeRound is one write that callers of sync wait for.
type writeRound struct {
	done chan struct{}
	err  error
}

const (
	// stateWriteGap is the least time between two writes of a state file
	// written in the background (topics.json, subscriptionGroup.json).
	stateWriteGap = 200 * time.Millisecond
	// stateRetryMax bounds the back-off between failed writes.
	stateRetryMax = 30 * time.Second
)

func newStateWriter(persist func() error, onError func(error)) *stateWriter {
	return &stateWriter{persist: persist, onError: onError, minGap: stateWriteGap,
		kick: make(chan struct{}, 1), hurry: make(chan struct{}, 1)}
}

// request asks for a write soon. It never blocks.
func (w *stateWriter) request() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// sync asks for a write now and waits for it: it returns nil once a write
// that started after the call succeeded, or that write's error.
func (w *stateWriter) sync() error {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return w.persist()
	}
	r := w.next
	if r == nil {
		r = &writeRound{done: make(chan struct{})}
		w.next = r
	}
	w.mu.Unlock()
	select {
	case w.hurry <- struct{}{}:
	default:
	}
	w.request()
	<-r.done
	return r.err
}

// run writes on request until stop closes.
func (w *stateWriter) run(stop <-chan struct{}) {
	gap := time.Duration(0) // none before the first write
	var last time.Time      // when the previous write ended
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-w.kick:
		case <-w.hurry:
		}
		w.mu.Lock()
		waited := w.next != nil // someone waits in sync: no gap
		w.mu.Unlock()
		if d := time.Until(last.Add(gap)); d > 0 && !waited {
			timer.Reset(d)
			select {
			case <-stop:
				return
			case <-w.hurry:
				timer.Stop() // Go 1.23+ timers: nothing stale is received later
			case <-timer.C:
			}
		}
		// Requests made so far are covered by this write (it reads the
		// state after this point); later ones ask for another.
		select {
		case <-w.kick:
		default:
		}
		select {
		case <-w.hurry:
		default:
		}
		w.mu.Lock()
		r := w.next
		w.next = nil
		w.mu.Unlock()
		start := time.Now()
		err := w.persist()
		last = time.Now()
		if r != nil {
			r.err = err
			close(r.done)
		}
		if err != nil {
			w.onError(err)
			gap = min(max(2*gap, w.minGap), stateRetryMax)
			w.request() // retry
			continue
		}
		gap = max(w.minGap, 10*last.Sub(start))
	}
}

// finish writes the state a last time, after run has returned, and answers
// the callers of sync still waiting. Later calls of sync write themselves.
func (w *stateWriter) finish(write func() error) error {
	w.mu.Lock()
	r := w.next
	w.next = nil
	w.done = true
	w.mu.Unlock()
	err := write()
	if r != nil {
		r.err = err
		close(r.done)
	}
	return err
}

// defaultMemoryWindow is 40% of 8 GiB, for platforms where RAM is unknown.
const defaultMemoryWindow = 8 << 30 * 40 / 100
