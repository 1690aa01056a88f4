// Package longpoll is the broker's one long-poll service: it parks the
// requests that found nothing — remoting pulls, remoting POPs, the gRPC
// front end's ReceiveMessage and PullMessage — until something that may
// give them messages happens or their deadline passes, and then hands each
// back to its front end, which re-runs it in the core and only shapes the
// answer. RocketMQ's broker does the same with PullRequestHoldService
// (pulls by topic@queue, woken by arrivals) and PopLongPollingService (POPs
// by topic@group@queue, woken by arrivals and by revives); its proxy holds
// a gRPC receive for long_polling_timeout less a reserve for the answer.
//
// A Holder is generic over what it parks (T, a small value such as a
// front end's responder and pooled result) and knows nothing of the wire,
// the store or the broker. The front end that owns the items gives it a
// Host: Run re-runs an item something woke, Expire answers one whose
// deadline passed (or that the holder drops because it stops), MaxOffset
// reads a queue's max offset. The core's arrival listener (OnArrival) feeds
// Arrived, its POP revive listener (OnRevive) feeds Revived.
//
//	Park(wait, deadline, item)      ──► list of (topic, queue) or (topic, any queue) + heap by due time
//	Arrived(topic, queue, max)      ──► wakes the pulls there below max, the POPs of the queue and of the topic
//	Revived(group, topic, queue, at)──► wakes that group's POPs there (at passed) or moves their WakeAt to at
//	loop goroutine                  ──► Host.Run for the woken and those whose WakeAt came, Host.Expire for the expired
//	Arrived, InlineArrivals set     ──► Host.Run itself for up to that many woken pulls (loop idle), Flusher.Flush
//
// # What wakes what
//
//   - A pull (Wait.Group empty) waits in (Topic, Queue) past Offset: an
//     arrival there that takes the queue's max offset past it.
//   - A POP (Wait.Group set) waits in (Topic, Queue), or in the whole topic
//     (AnyQueue): any arrival there; a revive of its group there (a changed
//     invisible time, an ack that unblocks a FIFO message group or makes
//     room in a full queue: package broker/pop's OnVisible); and its
//     WakeAt, the moment the first of its group's invisible messages
//     becomes visible again (the POP's result says when: pop.Result's
//     NextVisible). POP's revive is lazy (a message is redelivered by the
//     next pop after its invisible time), so that moment is a time, not an
//     event: the heap orders a POP by the earlier of WakeAt and its
//     deadline, and nothing looks periodically.
//   - A lite receive (Wait.Lite, RocketMQ 5.5's lite topics) waits on its
//     client (Wait.Client), not on a topic: Notified(client) wakes it (the
//     lite registry gave the client an event, or one of its deliveries
//     changed), and its WakeAt (a batch of the client visible again). The
//     ticket rule is per client: a Notified of the client after the
//     receive's Ticket runs it at once when it parks. Forget drops what
//     the holder keeps of a client that is gone.
//
// # Guarantees
//
//   - Park never waits for the loop or for another item: it takes the
//     holder's mutex for a map lookup and a few appends, then (pulls) calls
//     Host.MaxOffset (a quick read). A parked request therefore never
//     blocks the connection it came from. No goroutine is started per
//     request.
//   - Bounds: at most Options.MaxParked items are held at once, at most
//     Options.MaxPerOwner of one Wait.Owner (a connection) and at most
//     Options.MaxPerClient of one Wait.Client (a client over all its
//     connections); Park refuses more with ErrFull, ErrOwnerFull or
//     ErrClientFull, without taking the item, and counts the refusal. An
//     item counts from Park until the loop (or an Arrived that runs it
//     inline) takes it to run or expire (again when Run asks it to wait).
//   - Every parked item is handed back exactly once in the end: by
//     Expire, by a Run that does not ask to wait again, or to the caller by
//     a Cancel that reports true (an item waiting, or woken and not yet
//     run; an item an Arrived took to run inline is being run, and Cancel
//     reports false as for one the loop took). Expire comes when its
//     deadline passes (within the loop's wake-up latency) or when Stop
//     drains the holder (before Stop returns; Stop also waits for the
//     inline runs in progress, whose items, when Run asks them to wait
//     again, go to Expire since the holder is stopping). After Stop, Park
//     hands the item straight to Expire on the caller's goroutine
//     (ErrStopped): requests are answered on shutdown.
//   - An item Run asks to wait again (it found nothing it wants: another
//     consumer's tag, a race with the offset, another consumer of the group
//     took the message) is parked again, with the offset or WakeAt Run set
//     and its original deadline; when that deadline has passed or the
//     holder is stopping, it goes to Expire instead. A POP woken at its
//     WakeAt that names a time passed already loses it (no spin).
//   - No event is lost between a host's look and the park. A pull: the host
//     looks, finds nothing, then Parks; an arrival reported in between
//     finds the item in no list, so Park, once the item is linked, reads
//     Host.MaxOffset and wakes the queue's pulls below it (the same after a
//     Run that asked to wait past a later offset). This relies on the
//     host's contract that a queue's growth is visible to MaxOffset no
//     later than the Arrived call reporting it. A POP: the host takes a
//     Ticket (the count of events reported) before it looks; Park runs the
//     POP at once when its topic had an arrival or revive after the ticket
//     (the same after a Run, with the count taken when the loop took it).
//     Revive listeners run after the change is visible to a pop.
//
// # Goroutines and lock order
//
// One goroutine (Start to Stop) runs every Host call for woken, due and
// expired items, one item at a time, so the host needs no lock of its own
// for them (except the Expire that Park makes on its caller's goroutine
// after Stop, and the inline runs below). MaxOffset is also called on
// Park's caller's goroutine: it must be safe for concurrent use. Arrived
// and Revived run on the caller's goroutine (the store's dispatcher; the
// goroutine of an Ack or a ChangeInvisible) and move items to the ready
// list or in the heap and signal the loop through a one-slot channel:
// they never wait for the loop, and Revived and Notified never call the
// host. Cancel (a gRPC call whose client went away) takes back an item
// that is waiting or woken and not yet run; one being run or answered is
// the loop's (or the inline run's) to finish.
//
// Inline runs (Options.InlineArrivals, the broker's remoting holder): an
// Arrived that wakes pulls while the holder is started, the loop is not
// running a round and no woken item waits for it takes up to
// InlineArrivals of them as the loop would (each taken once, under the
// mutex) and runs them itself after unlocking: Host.Run, the re-park when
// Run asks to wait, then Flusher.Flush. That saves the hand-off to the
// loop (a goroutine wake-up and often a thread's) per arrival. The host
// then accepts Run on Arrived's caller's goroutine, concurrently with the
// loop's calls for other items: Run must not block (the store's
// dispatcher waits for it; the core's OnArrival contract), must not store
// anything (a Put may wait for the dispatcher) and must be safe for
// concurrent use on different items. POPs and lite receives are never run
// inline: a POP may store a dead letter. An Arrived made by the holder
// itself (Park's and a re-park's look at MaxOffset) runs nothing inline,
// so inline runs do not recurse; with InlineArrivals set, a host must not
// call Arrived from Run. Stats counts the inline runs (Counts.Inline).
//
// Flusher (optional): a host that queues its answers (the broker's, with
// remoting's Responder.Queue) is asked to send them once per batch of Host
// calls on a goroutine: after each loop round, after an Arrived's inline
// runs, after Park's Expire once stopped and after Stop's drain, so that a
// round's answers to one connection leave in one write.
//
// The holder's mutex is a leaf: nothing else is locked, and no Host method
// is called, while it is held. Host methods may therefore call Park,
// Revived and Stats (and Arrived, unless InlineArrivals is set).
//
// # Ownership
//
// Park copies item into a pooled entry; the pointer a Host method receives
// points into that entry and is valid only during the call (after it, the
// entry is parked again or its item is zeroed and the entry reused).
// Wait.Topic and Wait.Group are kept while the item is parked: they must
// not alias a buffer the caller reuses. Entries are pooled (sync.Pool), so
// in steady state Park, Arrived and the loop do not allocate. A topic's
// lists, once made, stay (empty) when its items are gone: a few words per
// queue id of every topic ever parked on or reported.
//
// # State and crashes
//
// Nothing is persisted: parked items live only in memory. A crash loses
// them together with their connections; clients send their requests again
// on new connections, and no message or offset depends on a parked item
// (a POP's messages are handed out by the pop that answers it).
package longpoll
