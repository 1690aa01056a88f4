// Package javacompat holds what Apogee must compute exactly as RocketMQ's
// Java code does, written once for every package that needs it: Java's
// String.hashCode of text decoded from (possibly malformed) UTF-8 (tag codes
// in message, key hashes in index), and Java's parsing of decimal text
// (Integer.parseInt, Long.parseLong, Double.valueOf, Boolean.parseBoolean,
// Double.compare) for header values in protocol, message properties in
// broker and SQL92 operands in filter.
//
// It is a leaf: it imports only the standard library, nothing of this
// module. Nothing in it allocates, except ParseDouble for a value with more
// than 24 significant digits. Golden files written by a JDK check it
// (testdata/java holds the programs that wrote them).
package javacompat
