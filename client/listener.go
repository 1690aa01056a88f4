package client

import (
	"context"
	"time"
)

// ConsumeResult is a listener's verdict on a batch of messages.
type ConsumeResult int

const (
	// ConsumeSuccess: the batch is consumed; its offsets may be committed.
	ConsumeSuccess ConsumeResult = iota
	// ConsumeRetryLater (concurrent listeners): redeliver every message of the batch
	// after a delay (send-back to the broker's retry topic); for an orderly listener
	// it means ConsumeSuspend.
	ConsumeRetryLater
	// ConsumeSuspend (orderly listeners): stop the queue for SuspendTime and consume
	// the batch again, up to MaxReconsumeTimes, then send it to the dead-letter queue.
	// For a concurrent listener it means ConsumeRetryLater.
	ConsumeSuspend
)

// ConcurrentListener consumes messages of any queue, concurrently. ctx ends at the
// consume timeout or when the consumer shuts down; ConsumeContextFrom(ctx) gives the
// batch's context.
type ConcurrentListener func(ctx context.Context, msgs []*MessageExt) ConsumeResult

// OrderlyListener consumes the messages of one queue in queue order, never two
// batches of one queue at a time.
type OrderlyListener func(ctx context.Context, msgs []*MessageExt) ConsumeResult

// ConsumeContext is what a listener may read and adjust about the batch it is given.
type ConsumeContext struct {
	// Queue is the queue the batch comes from.
	Queue MessageQueue
	// DelayLevel (concurrent) is the delay level of the redelivery when the batch is
	// retried: 0 (the default) lets the broker decide (3 + reconsume times), -1 sends
	// the messages straight to the dead-letter queue.
	DelayLevel int
	// AckIndex (concurrent): with ConsumeRetryLater, the messages up to and including
	// AckIndex count as consumed and only the rest are retried. Default -1.
	AckIndex int
	// SuspendTime (orderly) overrides the consumer's SuspendTime for this batch.
	SuspendTime time.Duration
}

type consumeCtxKey struct{}

// ConsumeContextFrom returns the batch's ConsumeContext from a listener's context, or
// nil outside a listener.
func ConsumeContextFrom(ctx context.Context) *ConsumeContext {
	cc, _ := ctx.Value(consumeCtxKey{}).(*ConsumeContext)
	return cc
}
