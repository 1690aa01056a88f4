#include "textflag.h"

// func prefetchAll(addrs *uintptr, n int)
TEXT ·prefetchAll(SB), NOSPLIT, $0-16
	MOVQ addrs+0(FP), SI
	MOVQ n+8(FP), CX
loop:
	MOVQ (SI), AX
	TESTQ AX, AX
	JZ next
	PREFETCHT0 (AX)
next:
	ADDQ $8, SI
	DECQ CX
	JNZ loop
	RET
