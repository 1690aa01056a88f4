// Package scenario is the broker's scenario suite: one table of messaging
// scenarios (send and pull, POP and ack, invisibility, offsets, retries,
// dead letters, delays and timers, transactions, filters, FIFO, priority
// messages), each written once against a small driver interface and run
// against three drivers: the messaging core's Go methods (broker/core), the remoting
// front end (package broker, over TCP with RocketMQ's remoting frames) and
// the gRPC front end (broker/grpcfe, with the generated MessagingService
// client of rmqpb); and across the protocols, on one node (package node)
// with both front ends attached, sending through one and consuming through
// the other. A
// scenario passes on every driver or shows where the front ends disagree.
// Refusals are compared by reason: the core's core.Reason, answered with
// the remoting code and the gRPC status code broker/core/errors.json gives
// it.
//
// The package is tests only: this file is its one non-test file, and it
// imports nothing (internal/importgraph lists the package with no edges).
//
// # Invariants
//
//   - Every driver starts its own core in t.TempDir() (and its front ends,
//     listening on 127.0.0.1:0) for each scenario, and stops them when the
//     scenario ends; every core has the same options (coreOptions), so a
//     difference between drivers is a difference of the front ends.
//   - A driver declares an operation unsupported (lacks) only where its
//     protocol has no such operation, naming RocketMQ's protocol fact; the
//     scenarios that need it are skipped on that driver with that reason.
//     A scenario is never skipped because a front end answers differently.
//   - Scenarios wait with internal/wait for the state they need (a message
//     delivered, a check pushed), never with sleeps; the suite's delays are
//     the smallest the features allow (delay levels of 25 ms steps, timers
//     a few hundred ms ahead), and no wall-clock upper bound is asserted.
//   - Sends, pulls and pops of the drivers do not hold (no long polling):
//     a scenario that expects a message polls until it comes.
package scenario
