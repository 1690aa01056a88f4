package core

import (
	"errors"

	"github.com/apogeemq/apogee/store"
)

// liteStore is the store's lite API (litestore's contract).
type liteStore interface {
	GetLite(parent, lite string, offset int64, maxMsgs, maxBytes int, res *store.GetResult) error
	LiteOffsets(parent, lite string) (min, max int64, ok bool)
	LiteTopics(parent string, fn func(lite string, min, max, lastStoreMs int64) bool)
	ExpireLite(parent string, idleBeforeMs int64, deleted func(lite string)) (int, error)
	CommitLiteOffset(group, parent, lite string, offset int64) error
	LiteOffset(group, parent, lite string) (int64, bool)
}

var errNoLiteStore = errors.New("broker: the store has no lite topic index")

type noLiteStore struct{}

func (noLiteStore) GetLite(string, string, int64, int, int, *store.GetResult) error {
	return errNoLiteStore
}
func (noLiteStore) LiteOffsets(string, string) (int64, int64, bool)           { return 0, 0, false }
func (noLiteStore) LiteTopics(string, func(string, int64, int64, int64) bool) {}
func (noLiteStore) ExpireLite(string, int64, func(string)) (int, error)       { return 0, errNoLiteStore }
func (noLiteStore) CommitLiteOffset(string, string, string, int64) error      { return errNoLiteStore }
func (noLiteStore) LiteOffset(string, string, string) (int64, bool)           { return 0, false }

func (c *Core) ls() liteStore {
	if s, ok := any(c.store).(liteStore); ok {
		return s
	}
	return noLiteStore{}
}
