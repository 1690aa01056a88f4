// Package message owns RocketMQ's message record and the small formats that
// travel with it: the stored record (format v1, which is byte for byte the
// record a pull response carries), the properties string, the sysflag bits,
// Java's String.hashCode (the consume-queue tag code), the offset and unique
// message ids, and the producer batch body.
//
// The package is pure: it holds no state besides [UniqIDGenerator], does no
// I/O and imports nothing of this module but internal/javacompat (Java's
// string hash and UTF-16 rules, shared with the other packages that need them).
//
// # Record layout (v1, all integers big-endian)
//
//	off  size  field
//	  0     4  TOTALSIZE (the whole record, this field included)
//	  4     4  MAGIC (MagicV1; MagicV2 only differs by a 2-byte topic length)
//	  8     4  BODYCRC (IEEE CRC-32 of the stored body, & 0x7FFFFFFF)
//	 12     4  QUEUEID
//	 16     4  FLAG
//	 20     8  QUEUEOFFSET
//	 28     8  PHYSICALOFFSET
//	 36     4  SYSFLAG
//	 40     8  BORNTIMESTAMP
//	 48  8/20  BORNHOST (IPv4 4 or IPv6 16 bytes, then port int32)
//	  …     8  STORETIMESTAMP
//	  …  8/20  STOREHOST
//	  …     4  RECONSUMETIMES
//	  …     8  PREPARED TRANSACTION OFFSET
//	  …   4+n  BODYLEN int32 + BODY
//	  …   1+t  TOPICLEN (1 unsigned byte; 2 bytes in v2) + TOPIC
//	  …   2+p  PROPLEN int16 + PROPERTIES
//
// Fields up to BORNHOST sit at fixed offsets (OffTotalSize … OffBornHost);
// everything after BORNHOST moves by 12 bytes for each IPv6 host, which the
// sysflag bits FlagBornHostV6 and FlagStoreHostV6 announce. The encoder sets
// those bits from the address families, so a record is always self-consistent.
//
// # Invariants
//
//   - A record encoded by [AppendRecord] is accepted by [Decode] and its
//     TOTALSIZE equals [EncodedSize]. The variable lengths sum exactly to
//     TOTALSIZE: no padding, no trailing bytes (the Go client walks a pull body
//     by field sizes and never looks at TOTALSIZE).
//   - [Decode], [ForEachProperty], [LookupProperty], [ForEachBatchEntry],
//     [SendProps.Parse] and [ParseOffsetMsgID] never panic and never
//     allocate in proportion to a length read from their input.
//   - [SendProps.Parse] accepts exactly what [ValidateProperties] accepts,
//     and then reads every key it records as [LookupProperty] would
//     (FuzzSendProps checks both); [SendProps.Scan] reads as LookupProperty
//     whatever the input.
//   - The end of a commit-log segment is closed by an 8-byte blank marker
//     (TOTALSIZE = bytes left in the segment, MAGIC = MagicBlank). It is not a
//     record: [Decode] reports it as [ErrBlank]; [IsBlank] recognises it.
//   - Bytes that recovery found damaged inside a segment are covered by an
//     8-byte hole marker (TOTALSIZE = the hole's length, MAGIC = MagicHole)
//     once copied aside. It is not a record either: [Decode] reports
//     [ErrHole]; [IsHole] recognises it; readers skip it.
//
// # Who may hold what
//
// A [View] aliases the buffer it was decoded from: every slice it returns
// (Body, Topic, Properties, Tags, …) is valid only while that buffer is. When
// the buffer is a mapped commit-log segment, the holder of the View must hold
// the segment's reference for as long as it uses those slices, and must copy
// anything it keeps longer. A [SendProps] aliases the properties it parsed
// the same way. Views are values; they are safe for concurrent
// reads as long as nobody writes the underlying bytes.
//
// The patch functions (SetQueueOffset, SetPhysicalOffset, SetStoreTimestamp,
// SetQueueID) write into an encoded record in place. They are meant for the
// single commit-log writer, inside its critical section, before the record is
// published to readers.
package message
