package message

// Sysflag bits of a stored record (SYSFLAG field).
const (
	FlagCompressed int32 = 0x1 // body is compressed (zlib unless a CompressionX type is set)
	FlagMultiTags  int32 = 0x2 // topic filter type MULTI_TAG

	TxNotType      int32 = 0x0 // not a transactional message
	TxPreparedType int32 = 0x4 // transaction half message (PREPARED)
	TxCommitType   int32 = 0x8 // committed transaction message
	TxRollbackType int32 = 0xC // rolled-back transaction message
	TxTypeMask     int32 = 0xC // the transaction-type bits

	FlagBornHostV6  int32 = 0x10 // BORNHOST holds a 16-byte IPv6 address
	FlagStoreHostV6 int32 = 0x20 // STOREHOST holds a 16-byte IPv6 address
	FlagNeedUnwrap  int32 = 0x40 // RocketMQ 5.x: inner batch to unwrap
	FlagInnerBatch  int32 = 0x80 // RocketMQ 5.x: inner batch

	CompressionLZ4  int32 = 0x100 // RocketMQ 5.x compression type LZ4
	CompressionZSTD int32 = 0x200 // RocketMQ 5.x compression type ZSTD
	CompressionZLIB int32 = 0x300 // RocketMQ 5.x compression type ZLIB (0 also means zlib)
	CompressionMask int32 = 0x700 // the compression-type bits
)

// TxType returns the transaction type bits of sysFlag: one of TxNotType,
// TxPreparedType, TxCommitType, TxRollbackType.
func TxType(sysFlag int32) int32 { return sysFlag & TxTypeMask }

// SetTxType returns sysFlag with its transaction type replaced by txType.
func SetTxType(sysFlag, txType int32) int32 {
	return sysFlag&^TxTypeMask | txType&TxTypeMask
}

// Dispatchable reports whether a record with this sysflag goes to consume
// queues: PREPARED and ROLLBACK records are stored but never dispatched.
func Dispatchable(sysFlag int32) bool {
	t := TxType(sysFlag)
	return t == TxNotType || t == TxCommitType
}
