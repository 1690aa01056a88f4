// Package errtext holds the test that keeps every package of the repository
// from branching on an error's text: an error's message (err.Error()) and a
// RocketMQ remark (a Remark field, core.Remark) are for people and for the
// wire, and a refusal's kind is read from its type, its sentinel or its
// reason (errors.Is, errors.As, core.ReasonOf). It has no code of its own:
// the test parses the non-test Go files of the repository and fails on a
// comparison, a switch or a strings/bytes/regexp match whose operand is such
// text.
package errtext
