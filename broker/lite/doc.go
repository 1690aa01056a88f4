// Package lite is the messaging state of RocketMQ 5.5's lite topics (RIP-83,
// docs/lite-topics.md): who subscribes to which lite topic, which lite
// topics each client has events for, and the FIFO state of each (group,
// lite topic). It is pure logic behind a Host (the core: the store's lite
// offsets and the group's committed lite offsets, and the wake-ups of the
// front ends), with no wire and no storage of its own; everything it holds
// is in memory, as RocketMQ's broker holds it (subscriptions come back with
// the clients' 30 s COMPLETE_ADD refresh after a restart).
//
// The model. A lite group (lite.bind.topic=<parent>) consumes lite topics
// of its parent. A client of the group subscribes to lite topics one by one
// (Sync). When a lite topic grows (Arrived), each group subscribed to it
// gets one event: the lite topic's name in the event set of one of its
// subscribing clients (the only one in an exclusive group; a random one
// with room in a shared group), and that client is told (Host.Notify) so
// that its parked receive runs. A client's receive (Pop) drains its events:
// per lite topic it reads from the group's offset, as one FIFO batch, which
// blocks the (group, lite topic) until the batch is acked (Ack: the
// group's offset moves past the acked prefix), its invisible time passes
// (delivered again, attempt + 1) or its invisibility changes
// (ChangeInvisible; with suspend the attempt is not raised).
//
// Invariants:
//   - at most one batch of a (group, lite topic) is in flight; the group's
//     committed offset is the batch's start until its prefix is acked;
//   - a client's event set holds a lite topic at most once and at most its
//     capacity (the group's lite.sub.client.max.event.cnt, else
//     Options.MaxClientEvents); past it the client is marked overflowed and
//     its next Pop with no event left walks its subscriptions for lite
//     topics with messages beyond the group's offset (RocketMQ's full
//     dispatch);
//   - a lite topic whose batch is in flight is in its owner client's
//     pending set, so that the owner's Pop sees the invisible time pass
//     (NextVisible tells the long poll when);
//   - the active subscriptions (client × lite topic) never exceed
//     Options.MaxSubscriptions; a PARTIAL_ADD past it is refused
//     (ErrSubscriptionQuota);
//   - at most one receive reads a (group, lite topic) at a time: Pop
//     reserves it under the lock and calls its ReadFunc without the lock;
//     the batch is committed only if the (group, lite topic)'s record is
//     the same and unchanged (its generation: any ack, change of
//     invisibility, end of a batch or reset moves it) and the client
//     still holds the lite topic; otherwise the read is dropped and the
//     lite topic looked at again. A receive that meets a reserved lite
//     topic passes over its event (RocketMQ's failed tryLock) and marks
//     it; the reader re-arms the event if it found nothing;
//   - an ack that completes a batch gives the lite topic an event at once
//     when it has more messages (RocketMQ's ackLite dispatch);
//   - Host methods are called without the registry's lock, except Offset,
//     Commit and LiteMax, which must not call back into the registry; the
//     ReadFunc is called without it and may call the registry.
package lite
