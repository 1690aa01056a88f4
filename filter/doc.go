// Package filter compiles consumer subscriptions (tag lists and SQL92
// selectors) into immutable filters that the broker evaluates during pulls,
// per message, without allocating. Semantics follow Apache RocketMQ's broker
// (ExpressionMessageFilter, SelectorParser, filter/expression).
package filter
