// Package longpoll parks requests that found nothing new in a queue until a
// message arrives there or their deadline passes: the broker's long-polling
// pulls today, and anything else that waits the same way (POP, the gRPC
// front end's receives).
//
// A Holder is generic over what it parks (T, a small value such as the
// broker's pull state) and knows nothing of the wire, the store or the
// broker. The host that owns the items gives it a Host: Run re-runs an item
// that an arrival woke, Expire answers one whose deadline passed (or that
// the holder drops because it stops), MaxOffset reads a queue's max offset.
// The store's arrival callback feeds Arrived.
//
//	Park(pos, deadline, item) ──► queue list of (pos.Topic, pos.Queue) + deadline heap
//	Arrived(topic, queue, max)  ──► moves the items waiting there below max to the ready list
//	loop goroutine              ──► Host.Run for the ready, Host.Expire for the expired
//
// # Guarantees
//
//   - Park never waits for the loop or for another item: it takes the
//     holder's mutex for a map lookup and two appends, then calls
//     Host.MaxOffset (a quick read). A parked request therefore never
//     blocks the connection it came from.
//   - Every parked item is handed back to the host exactly once in the end,
//     by Expire, or by a Run that does not ask to wait again: when an arrival
//     in its queue reaches past its offset (Run), when its deadline passes
//     (Expire, within the loop's wake-up latency), or when Stop drains the
//     holder (Expire, before Stop returns). After Stop, Park hands the item
//     straight to Expire on the caller's goroutine.
//   - An item Run asks to wait again (it found nothing it wants: another
//     consumer's tag, a race with the offset) is parked again at the offset
//     Run returns, with its original deadline; when that deadline has passed
//     or the holder is stopping, it goes to Expire instead.
//   - An arrival wakes only the items of its own (topic, queue) whose offset
//     is below the queue's new max offset.
//   - No arrival is lost between a host's look at the queue and the park:
//     the host looks (finds nothing), then Parks; an arrival reported in
//     between finds the item in no list. So Park, once the item is linked,
//     reads Host.MaxOffset and wakes the queue's items below it, as an
//     arrival report would; the same after a Run that asked to wait past a
//     later offset (an arrival reported while Run ran found the item in no
//     list). This relies on the host's contract that a queue's growth is
//     visible to MaxOffset no later than the Arrived call reporting it.
//
// # Goroutines and lock order
//
// One goroutine (Start to Stop) runs every Host call for woken and expired
// items, one item at a time, so the host needs no lock of its own for them
// (except the Expire that Park makes on its caller's goroutine after Stop).
// MaxOffset is also called on Park's caller's goroutine: it must be safe
// for concurrent use.
// Arrived runs on the caller's goroutine (the store's dispatcher) and only
// moves items to the ready list and signals the loop through a one-slot
// channel: it never waits for the loop and never calls the host.
//
// The holder's mutex is a leaf: nothing else is locked, and no Host method
// is called, while it is held. Host methods may therefore call Park,
// Arrived and Stats.
//
// # Ownership
//
// Park copies item into a pooled entry; the pointer a Host method receives
// points into that entry and is valid only during the call (after it, the
// entry is parked again or its item is zeroed and the entry reused).
// pos.Topic is kept while the item is parked: it must not alias a buffer
// the caller reuses. Entries are pooled (sync.Pool), so in steady state
// Park, Arrived and the loop do not allocate. A topic's lists, once made,
// stay (empty) when its items are gone: a few words per queue id of every
// topic ever parked on.
//
// # State and crashes
//
// Nothing is persisted: parked items live only in memory. A crash loses
// them together with their connections; clients send their requests again
// on new connections, and no message or offset depends on a parked item.
package longpoll
