// Package timerwheel delivers messages at arbitrary times: RocketMQ 5's
// timer messages (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS), and
// the broker's own timed re-deliveries (a group's retry policy).
//
// The broker routes a timer message (DeliverTime, which reads the send's
// properties as parsed once, message.SendProps; AppendRoute) to the timer
// topic (Topic, rmq_sys_wheel_timer, queue 0) with REAL_TOPIC, REAL_QID and
// TIMER_OUT_MS; the store asks the Wheel for its consume-queue tag code
// (TagCode), which packs the delivery time and the store time, so the wheel
// works from the consume queue's entries alone. The Wheel is an index of
// the pending entries kept by one goroutine: a binary min-heap of 32-byte
// entries without pointers (the garbage collector does not scan it),
// ordered by due time. The goroutine loads new entries as the store
// dispatches them (Arrived wakes it), sleeps until the earliest is due, and
// re-stores due messages to their real topic through the host's inner put
// (the timer properties and DELAY removed, WAIT=false). Inserting and firing
// cost O(log n); nothing scans the pending timers. A record that would be
// deleted by retention before its time is written again to the timer topic
// (a roll, TIMER_ROLL_TIMES + 1) once RollInterval after it was stored.
//
// # Invariants
//
//   - An entry's due time and whether it rolls are functions of its tag
//     code alone (dueOf), so a restart recomputes the same ones whatever
//     the clock says.
//   - The checkpoint (Checkpoint) is consistent when published: every entry
//     below PendingOffset is done, every entry in [PendingOffset,
//     LoadedOffset) due before FiredBefore is done, nothing from
//     LoadedOffset on was acted upon. PendingOffset is the lowest 4096-entry
//     chunk still holding an entry loaded and not done (an entry popped for
//     a put that failed stays counted). FiredBefore never moves backwards
//     within the range a restart restored.
//   - After a restart the heap is rebuilt from the timer queue from
//     PendingOffset on, skipping what the checkpoint says is done.
//   - A re-put batch holds at most reput.MaxBatchLength records and
//     reput.MaxBatchBytes bytes (at least one record); its records stay
//     pinned until the put returns. A failed put puts its entries back in
//     the heap and is retried after a second.
//
// # Goroutines and locks
//
// Start launches the loop goroutine; Stop closes the stop channel, waits
// for it and publishes a last checkpoint. The heap, the chunk counts, the
// loader's position and the scratch belong to the loop (to Load and Start
// before it runs, to Stop after it ended). mu guards what others read: the
// published checkpoint, the pending count and the change count; persistMu
// serialises Persist and is taken before mu. Both are leaves: the host is
// not called while mu is held; Persist calls the host's WriteState under
// persistMu alone. TagCode and Arrived take no lock and never block: the
// store's dispatcher calls them.
//
// # Crash cost
//
// The checkpoint (StateFile, config/timerCheckpoint.json) is written by
// Persist, which the broker calls every ProgressFlushInterval when it
// changed and at Shutdown (after Stop). After a crash the wheel reloads the
// timer queue from the last written PendingOffset: timers fired after that
// write are fired again (at least once, never lost), and the reload costs a
// read of the entries (not the records) from there. Timer records are the
// store's: one acknowledged in sync-flush mode survives a crash.
package timerwheel
