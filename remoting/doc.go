// Package remoting owns Apogee's connections: the Server that brokers and name servers
// accept clients with, and the Client (and Pool) that Apogee's client and a broker
// talking to a name server dial with. Frames are RocketMQ remoting frames (package
// protocol); this package moves them.
//
// # Requests and responses
//
// Both ends of a connection are a Conn. Either side may send requests at any time and
// have many in flight: each request gets an opaque from the sending Conn's atomic
// counter, and a response (a frame with protocol.FlagResponse) is matched to its
// request by that opaque alone, in any order. A response whose request is no longer
// waited for (timed out, cancelled) is dropped. Every request is answered unless it
// carries protocol.FlagOneway (the official Go client never sets it; InvokeOneway
// does) or its handler returns NoReply.
//
// Requests received are served by a Handler: the Server's, or
// ClientOptions.Handler for requests a server pushes to a client (a broker sending
// NOTIFY_CONSUMER_IDS_CHANGED or CHECK_TRANSACTION_STATE with Conn.InvokeOneway or
// Conn.Invoke). Unknown request codes are the handler's business (a broker answers
// REQUEST_CODE_NOT_SUPPORTED).
//
// # Threading model
//
// Each connection runs two goroutines.
//
//   - The read goroutine reads from the socket into the connection's read buffer, as
//     many bytes as are ready, and handles every complete frame in it in order. A
//     request is decoded into a Command the connection reuses and passed to
//     Handler.ServeRemoting on this goroutine, inline: a cheap handler (a send into the
//     commit log) costs no hand-off. A response is matched to its waiting call; for
//     Invoke it is copied into the caller's Command, for InvokeAsync the callback runs
//     here. Handlers and callbacks must therefore not block: a handler that must wait
//     calls Conn.Defer, returns Deferred, and answers later from any goroutine through
//     the Responder. The read goroutine never waits for a deferred request; it only
//     stops reading while the connection is over a limit, or while a large frame
//     waits for room in the receive budget (below).
//   - The writer goroutine owns the socket's write side. Responses and requests are
//     queued by encoding their header (and Cmd.Body) into a shared pending buffer under
//     the connection's write lock; zero-copy body slices are spliced in by reference.
//     The writer takes everything pending at once and writes it with one net.Buffers
//     write (writev), so responses that become ready together, such as the answers to
//     all the requests in one read, leave in one syscall (on a connection without
//     writev, a TLS one, the pieces are copied into one buffer and written with one
//     Write: one TLS record per 16 KiB rather than one per piece). The read goroutine
//     sends the answers of a read once, after handling all the frames it read (or
//     sooner once 64 KiB are queued, by waking the writer); answers a handler gives
//     through its own request's Responder before it returns (a send answered at once)
//     count as the read's. When they are few (at most 4: requests arriving one by
//     one) and the writer is idle, the read goroutine writes them itself with one
//     non-blocking writev (Linux, TCP and Unix sockets): no wake-up of the writer, no
//     goroutine switch per read; a read of more answers (a peer with many requests in
//     flight) wakes the writer, whose yield lets the next read's answers share its
//     write. The read goroutine never waits for room: what that
//     call does not take is carried over to the writer, which writes it first, so the
//     read goroutine never blocks on its peer and two peers cannot deadlock. Other
//     goroutines (Responder.Reply, Invoke) wake the writer when they queue.
//     A goroutine that answers many deferred requests in one go (the broker's
//     long-poll holder after an arrival) uses Responder.Queue instead, which
//     does not wake the writer, and then Conn.Flush once per connection: the
//     same rule as a read's end (a few frames and an idle writer: one
//     non-blocking writev on that goroutine; else the writer is woken).
//     A woken writer yields once (runtime.Gosched) before taking the batch, so that
//     goroutines made runnable by the same event (callers woken by responses) add
//     their frames first: with 64 requests in flight this takes a client from ~3 to
//     ~30 frames per write and doubles throughput, at no cost to a lone request.
//     The writer keeps two batch buffers (one filling, one writing); once it
//     has been idle for a second it drops either one grown past 256 KiB, so an
//     idle connection does not keep the megabytes a burst of large frames
//     needed, while a connection under load keeps its buffers.
//
// A Server also runs one accept goroutine per Serve call. Nothing else runs in the
// background; an InvokeAsync with a timeout uses a runtime timer.
//
// # Buffer ownership
//
//   - A request passed to a handler (and the response of an InvokeAsync callback) is
//     valid only until the handler (callback) returns: its Body aliases the read
//     buffer, which is reused for the next read (a frame larger than 64 KiB is read
//     into a pooled buffer that another connection may take next), and its Ext and
//     Remark live in a Command that is decoded into again. A deferring handler copies what it keeps
//     (it usually has decoded a typed header and copied its strings already). This is
//     the one rule, and it keeps the server path allocation-free.
//   - A Response's Cmd (header and Cmd.Body) is copied when the response is queued, so
//     Cmd.Body may alias the request (an echo) and Cmd may be reused at once.
//   - Response.Body slices (store views) are written as they are, in the same vectored
//     write as their header, never copied. They must stay unchanged until
//     Response.Release runs; Release runs exactly once: after the write that carried
//     them returned, successfully or not, or when the connection closes before they
//     were written, or at once if the response is not sent (oneway, NoReply, Deferred,
//     a Reply that fails). It runs on the writer goroutine or the goroutine that
//     queued the response.
//   - Invoke returns a new Command owned by the caller; InvokeInto copies into the
//     caller's Command, reusing its buffers.
//   - Requests passed to Invoke, InvokeAsync and InvokeOneway are encoded before the
//     call returns (or starts waiting) and are not retained; their Opaque and Flag are
//     set by the call.
//
// # Limits and their defaults (Options)
//
//   - MaxFrameSize, 16 MiB (protocol.DefaultMaxFrameSize): a peer announcing a larger
//     frame is disconnected before anything is allocated for it. Larger outgoing
//     frames are refused with protocol.ErrFrameTooLarge.
//   - ReceiveBudget, 128 MiB (DefaultReceiveBudget) for the whole process, shared by
//     every Server that has none of its own: the memory held for frames larger than
//     a connection's own read buffer while they arrive (see "Receiving" below).
//   - FrameTimeout, 30 s: a frame still incomplete that long after its first byte
//     closes the connection (ErrFrameTimeout). MinReceiveRate, 64 KiB/s after
//     SlowSenderGrace, 5 s: a frame whose first byte came t ago and of which R bytes
//     arrived is closed (ErrSlowSender) once t > 5 s + R / 64 KiB/s, so a peer that
//     trickles a byte now and then is gone seconds after the grace.
//   - IdleTimeout, 120 s (the Go client's read deadline): no bytes received for that
//     long closes the connection.
//   - WriteTimeout, 60 s: one vectored write that cannot complete in that time (the
//     peer stopped reading) closes the connection.
//   - MaxInFlight, 4096 deferred requests, and MaxPendingBytes, 64 MiB of queued
//     response bytes: over either, the read goroutine stops reading (TCP pushes back
//     on the peer) until answers are written. Only what this side owes the peer
//     counts, so two peers cannot deadlock each other.
//   - ReadBufferSize, 4 KiB initially per connection; this own buffer doubles up to
//     64 KiB while reads fill it, and is never charged to the budget.
//
// # Receiving
//
// A connection reads as many frames per read as its own buffer holds, and handles
// every complete one; nothing is allocated per frame. The buffer grows only when
// it is full, so a length field alone allocates nothing, and a connection holds at
// most max(its own buffer, twice what it received) for an incomplete frame.
//
// A frame larger than the own buffer, once the own buffer is full of it, reserves in
// the ReceiveBudget the size class that holds all of it (a power of two times 64 KiB
// plus 64 KiB: 16 MiB + 64 KiB for the largest frame), all at once and while holding
// nothing else of the budget, so that connections never wait for each other while
// holding part of it and the budget cannot deadlock. The frame then moves into a big
// buffer that grows, within the reservation, as its bytes arrive (classes up to 1088
// KiB come from a pool; larger ones are allocated as they are needed). Reads stop at
// the frame's end, so once it is handled the big buffer and the reservation go back
// and the next frame starts in the own buffer. The read goroutine owns the buffers
// and the reservation, and gives them back when it exits, whatever the cause.
//
// Who owns the budget: whoever created it. By default it is SharedReceiveBudget(),
// one per process (a broker's remoting and name-server listeners share it);
// SetLimit changes its limit at run time. A Client's connections charge none unless
// Options.ReceiveBudget is set. Invariants: InUse is the sum of the reservations of
// the connections that hold a big buffer now; InUse <= Limit; each connection holds at
// most one reservation; a waiting frame holds none.
//
// When a reservation does not fit, the frame waits (its connection stops reading, and
// TCP pushes back on the peer), in arrival order, until room is released or its
// FrameTimeout passes; then the connection is closed with ErrReceiveBudget. A frame
// larger than the whole limit is closed at once. Frames of at most 64 KiB never wait,
// so ordinary clients keep being served while senders of half frames hold the budget;
// the frame timeout and the slow-sender rule then take those senders off. The time
// this side spends not reading (for the budget, MaxInFlight or MaxPendingBytes) does
// not count against the sender's rate, and only the budget's wait counts against the
// frame timeout.
//
// What is logged and counted: the budget logs one Warn line when it becomes
// exhausted (a frame waits) and one Info line when it has room again (nothing waits
// and at most 3/4 of it is reserved), with the number of waits and timeouts in
// between. A Server logs the first connection it closes for a receive limit (frame
// timeout, slow sender, budget) with a Warn line, counts the following ones for a
// minute and reports them on the next line. Counters: ServerStats (FrameTimeouts,
// SlowSenders, BudgetCloses, and the budget's ReceiveBudgetStats: Limit, InUse, Peak,
// Waiting, Exhausted, Reserves, Waits, Timeouts, Refused, Exhaustions); a broker
// reports them in its runtime info as remotingFrameTimeouts, remotingSlowSenders,
// remotingReceiveBudgetCloses and remotingReceiveBudget{Limit, InUse, Peak, Waiting,
// Exhausted, Reserves, Waits, Timeouts, Refused, Exhaustions}.
//
// # Connections: one limit per process
//
// A ConnLimit counts the connections of every server and listener that share it;
// SharedConnLimit() is the process's, the default of every Server. A listener whose
// connections some other server handles (gRPC, the HA stream, HTTP, Raft) counts
// against it through LimitListener, which also gives a connection's count back on its
// first Close. A connection over a bound (in all, per source address, or the
// file-descriptor reserve of ReserveFDs: the soft RLIMIT_NOFILE less the descriptors
// the process holds for anything else, less a headroom) is closed as accepted, before
// a byte is read; each bound logs one Warn a minute. Accept errors on an open listener
// (EMFILE, ...) are retried after a pause growing from 5 ms to 1 s, on a Server's and
// on a LimitListener's loop alike, with one Warn a minute. Invariant: Open is the
// number of accepted connections not yet closed, over every sharer; a Server's are
// released when the connection is removed, a LimitListener's on Close. ConnLimit.mu
// is taken with no other lock held.
//
// # Failures
//
// A malformed frame (length over the limit or under 4, a header that does not decode,
// the peer closing inside a frame) closes that connection with one Warn log line and
// nothing else; ordinary closes (EOF, reset, idle) log one Debug line; closes for a
// receive limit are logged as described under "Receiving". A handler panic
// is recovered, logged with its stack, and answered with SYSTEM_ERROR (code 1); the
// connection keeps serving. When a connection closes, its outstanding Invokes fail
// with an error wrapping ErrClosed and the cause, queued zero-copy bodies are
// released, and the Server's OnClose callbacks run once both goroutines have exited,
// just before Conn.Done is closed.
//
// Server.Shutdown stops accepting, stops reading (frames already read are still
// served), waits until every deferred request is answered and written, and closes
// each connection, or closes them all when its context ends. Server.Close closes at
// once.
//
// # Lock order
//
// Conn.cmu (outstanding calls) and Conn.wmu (write queue, limits) are never held
// together. Server.mu is never held while a connection lock is taken. A
// ReceiveBudget's mutex is taken with no other lock held and nothing is logged under
// it.
package remoting
