package core

import (
	"strconv"

	"github.com/apogeemq/apogee/store"
)

// maxQueryMessages caps QueryMessage's maxNum (the Java broker's maxMsgsNumBatch).
const maxQueryMessages = 64

// QueryResult is the answer to QueryMessage: the records found, newest
// first, as views of the commit log (each pins its segment until released:
// see ReleaseViews), and how far the key index reaches (its last update's
// store time and commit-log offset), which the answer reports even when
// nothing is found.
type QueryResult struct {
	Views                                        []store.View
	IndexLastUpdateTimestamp, IndexLastUpdatePhy int64
}

// QueryMessage returns the records of a topic whose UNIQ_KEY or KEYS hold
// key, stored between beginMs and endMs, at most maxNum (capped to 64)
// (QUERY_MESSAGE, 12). QUERY_NOT_FOUND (22) when there are none. The
// caller releases the views (ReleaseViews) once it has written them.
func (c *Core) QueryMessage(topic, key string, beginMs, endMs int64, maxNum int32) (QueryResult, error) {
	n := int(min(max(maxNum, 1), maxQueryMessages))
	views, err := c.store.QueryByKey(topic, key, beginMs, endMs, n, nil)
	var r QueryResult
	r.IndexLastUpdateTimestamp, r.IndexLastUpdatePhy = c.store.IndexLastUpdate()
	if err != nil {
		ReleaseViews(views)
		return r, wrapError(ReasonSystemError, "query message: "+err.Error(), err)
	}
	if len(views) == 0 {
		return r, newError(ReasonMessageNotFound, "can not find message, maybe time range not correct")
	}
	r.Views = views
	return r, nil
}

// ViewMessage returns the record at a commit-log offset (VIEW_MESSAGE_BY_ID,
// 33: the offset decoded from an offset message id by the client), as a
// view the caller releases once written.
func (c *Core) ViewMessage(commitLogOffset int64) (store.View, error) {
	v, err := c.store.ReadMessage(commitLogOffset)
	if err != nil {
		return store.View{}, wrapError(ReasonMessageNotAtOffset, "can not find message by the offset, "+strconv.FormatInt(commitLogOffset, 10), err)
	}
	return v, nil
}

// ReleaseViews releases every view of vs.
func ReleaseViews(vs []store.View) {
	for _, v := range vs {
		v.Release()
	}
}
