// Package filter compiles consumer subscriptions into filters the broker
// evaluates during pulls, per message, without allocating: tag lists
// ("TagA || TagB") checked against consume-queue tag codes and the record's
// TAGS property, and SQL92 selectors evaluated over the record's encoded
// properties string. The semantics are Apache RocketMQ's broker's, fact by
// fact (ExpressionMessageFilter, FilterAPI, SelectorParser.jj and
// filter/expression/*.java); where Apogee differs, this comment says so.
//
// # Who may hold what
//
// New, CompileTags and Compile return immutable values: compile once per
// subscription version and share the result among any number of concurrent
// pulls. MatchTagCode, MatchProperties and Match only read the bytes they
// are given, never keep them, and do not allocate (two rare exceptions are
// noted under Numbers below). A pull asks MatchTagCode for each consume-queue
// entry, reads the records that pass, and asks MatchProperties of those when
// NeedsRecord is true.
//
// # Tag subscriptions
//
// As the Java client's FilterAPI builds them: "" and "*" (exactly; " * " is
// the tag "*") accept everything. Otherwise the string is split on "||",
// each item trimmed of the characters Java's String.trim removes (bytes <=
// 0x20), empty items dropped, duplicates merged. Like Java's String.split,
// which drops trailing empty strings, a string made only of "||" separators
// is an error; all-blank items ("  ") give a filter that accepts nothing.
//
// Tag codes are Java's String.hashCode of each tag (message.JavaHashCode,
// UTF-16 units), computed here: a client's codeSet is never trusted (the Go
// client hashes UTF-8 bytes). MatchTagCode passes an entry whose code,
// truncated to 32 bits as Java's tagsCode.intValue() does, is one of them.
// A message without tags is stored with code 0 and does not pass: the Java
// broker passes only a null code, which arises only for consume-queue
// extension addresses (ConsumeQueueExt), not for a missing tag.
//
// The Java broker stops there and lets the client drop hash collisions
// (tagsSet.contains(msg.getTags())); MatchProperties makes that exact check
// on the broker, so collisions are not shipped: the TAGS value must equal a
// subscribed tag byte for byte. A missing or empty TAGS never matches.
//
// # SQL92 grammar
//
// Tokens (JavaCC rules: the longest match wins, the earlier rule on a tie):
//
//	white space   = " " | "\t" | "\n" | "\r" | "\f"
//	comment       = "--" {any but "\n", "\r"} ("\n" | "\r")   (without a line break, "--" is two minus signs)
//	              | "/*" ... "*/"
//	keyword       = NOT | AND | OR | BETWEEN | IN | TRUE | FALSE | NULL | IS
//	              | CONTAINS | STARTSWITH | ENDSWITH            (any letter case)
//	identifier    = (letter | "_" | "$") {letter | digit | "_" | "$"}   (ASCII, case-sensitive, not a keyword)
//	decimal       = "0" | ("1"…"9") {digit} ["l" | "L"]
//	float         = digit {digit} "." {digit} [exponent] | "." digit {digit} [exponent] | digit {digit} exponent
//	exponent      = ("e" | "E") ["+" | "-"] digit {digit}
//	string        = "'" {"''" | any but "'"} "'"              ('' is one quote)
//	punctuation   = "=" | "<>" | ">" | ">=" | "<" | "<=" | "(" | ")" | "," | "+" | "-"
//
// Productions:
//
//	selector      = orExpr .
//	orExpr        = andExpr {OR andExpr} .
//	andExpr       = equalityExpr {AND equalityExpr} .
//	equalityExpr  = comparison {("=" | "<>") comparison | IS [NOT] NULL} .
//	comparison    = unary {(">" | ">=" | "<" | "<=") unary
//	                      | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
//	                      | [NOT] BETWEEN unary AND unary
//	                      | [NOT] IN "(" string {"," string} ")"} .
//	unary         = "+" unary | "-" unary | NOT unary | primary .
//	primary       = string | decimal | float | TRUE | FALSE | NULL | identifier | "(" orExpr ")" .
//
// Consequences worth knowing, all RocketMQ's (the grammar is ActiveMQ's):
//
//   - NOT binds tighter than every comparison: NOT a = 'x' is (NOT a) = 'x',
//     which never matches. Write NOT (a = 'x').
//   - A bare property used as a condition is cast to boolean, and a property
//     value (always a string) is never a Boolean: "a" is FALSE when a is set,
//     unknown when not. Write a = TRUE.
//   - The selector ends where the grammar stops: there is no end-of-input
//     rule, so tokens that cannot continue the expression are ignored
//     ("a = 1 b = 2" is "a = 1"; "a = 007" is "a = 0"). Tokens are read
//     lazily, so a character that cannot start a token is an error only if
//     the parser looks at it.
//
// Compile-time checks, each a *ParseError (RocketMQ throws them while
// building the expression):
//
//   - AND, OR and NOT need conditions (or properties); the selector must be
//     one. "5", "'x'", "-a" are refused.
//   - = and <> refuse a NULL operand (use IS NULL) and a TRUE/FALSE constant
//     compared with a non-boolean constant (TRUE = 1).
//   - < <= > >= and BETWEEN take only numeric constants, properties and
//     negations: a > 'x', a > TRUE and (a = 1) > 2 are refused.
//   - BETWEEN with two constant bounds needs them non-NULL and low <= high
//     (a negated literal is not a constant: BETWEEN 5 AND -5 is accepted and
//     matches nothing). NOT BETWEEN checks nothing.
//   - IN needs a property on its left.
//   - Integer literals must fit a Java long; they are Integers when they fit
//     32 bits, Longs otherwise. Float literals are Doubles and must lie
//     within [Double.MIN_VALUE, Double.MAX_VALUE]: 0.0 is refused (write 0).
//   - Nesting is limited to 256 levels (Java's parser would overflow its
//     stack somewhere; this bound keeps Match's recursion shallow).
//
// Error positions are byte offsets into the expression.
//
// # SQL92 evaluation
//
// Properties. A selector names message properties; the properties string is
// read as the Java broker reads it (MessageDecoder.string2messageProperties):
// pairs separated by 0x02, the key up to the first 0x01 and the value after
// it, pairs with an empty key or an empty value skipped (an empty value is a
// missing property), the last of repeated keys winning. System properties
// are properties like any other: TAGS, KEYS, UNIQ_KEY and the rest are
// visible under their names; nothing else (topic, timestamps) is. A present
// property is a Java String; a missing one is null.
//
// Results. A condition is TRUE, FALSE or unknown (null). A message matches
// only when the selector is TRUE. AND, OR and NOT use three-valued logic and
// evaluate left to right, stopping at the first FALSE (AND) or TRUE (OR). An
// evaluation error (below: a Java exception) rejects the message whatever the
// rest of the selector would have said, unless a short-circuit skipped it:
// with b = "abc", "a = 1 OR b > 5" matches when a = "1", "b > 5 OR a = 1"
// never does.
//
// Comparisons. A comparison with null is unknown, with two exceptions that
// come from how RocketMQ implements = (IS NULL is "= NULL"): null = null is
// TRUE (so "a = b" holds when both are missing), and a non-null left operand
// = null is FALSE. When both operands are non-null, the types decide
// (ComparisonExpression.__compare, string conversion on, as SelectorParser
// always sets it):
//
//	left \ right   String                 Integer/Long            Double          Boolean
//	String         bytes equal (=, <>)     Integer.valueOf/        Double.valueOf  Boolean.valueOf
//	               both Double.valueOf     Long.valueOf(left)      (left)          (left)
//	               (< <= > >=)
//	Integer/Long   X.valueOf(right)        as Longs                as Doubles      never equal
//	Double         Double.valueOf(right)   as Doubles              Double.compare  never equal
//	Boolean        error                   never equal             never equal     as Booleans
//
// So a > 5 parses the property with Integer.valueOf: "10" and "+010" work,
// "10.5", " 10" and "4000000000" are errors (no match); a > 5.0 uses
// Double.valueOf, which trims spaces and takes "1e3", "7d", "0x1p3", "NaN"
// and "Infinity" (Double.compare puts NaN above everything). Integer.valueOf
// takes any Unicode decimal digit of the BMP ("١٢" is 12), as Java's
// Character.digit does. a = 5 with a = "abc" is an error too, so a <> 5 does
// not match it either. Boolean.valueOf is true only for "true" in any case:
// a = FALSE matches a = "no". Two properties compare as strings with = and
// as doubles with < <= > >=.
//
// Other operators:
//
//   - BETWEEN is (v >= low AND v <= high); NOT BETWEEN is (v < low OR
//     v > high).
//   - IN and NOT IN compare the property's string with the listed strings; a
//     missing property is unknown for both.
//   - CONTAINS, STARTSWITH, ENDSWITH and their NOT forms give FALSE, never
//     unknown, for a missing or non-string operand and for an empty search
//     string; otherwise the test or its negation. So NOT (a CONTAINS 'x') is
//     TRUE when a is missing, while a NOT CONTAINS 'x' is FALSE.
//   - Unary minus negates a number (Integer and Long wrap around as in Java)
//     and turns anything else into null.
//
// Numbers. Property values are parsed on the fly, without allocating, by
// Integer.parseInt, Long.parseLong and Double.valueOf as internal/javacompat
// implements them (checked there against a golden file written by a JDK).
// Double parsing hands the significant digits to strconv.ParseFloat through a
// stack buffer: it allocates only for a value with more than 24 significant
// digits.
//
// # Differences from the Java broker
//
//   - Strings compare as UTF-8 bytes. Java compares decoded UTF-16 strings,
//     which gives the same answers for valid UTF-8; two different invalid
//     byte sequences that Java would both decode to U+FFFD compare unequal
//     here.
//   - The Unicode tables are Go's, not the JDK's (digits of scripts added in
//     between may differ), and JavaCC's case folding of non-ASCII letters in
//     identifiers and keywords is not reproduced: identifiers are ASCII.
//   - STARTSWITH and ENDSWITH follow the shape of CONTAINS in SelectorParser
//     (a string literal on the right, a NOT form), as RocketMQ 5 defines them.
//   - The nesting limit above.
//   - Tags: the exact TAGS check of MatchProperties (see Tag subscriptions).
package filter
