#include "textflag.h"

// func prefetchAll(addrs *uintptr, n int)
TEXT ·prefetchAll(SB), NOSPLIT, $0-16
	MOVD addrs+0(FP), R1
	MOVD n+8(FP), R2
loop:
	MOVD.P 8(R1), R0
	CBZ R0, next
	PRFM (R0), PSTL1KEEP
next:
	SUBS $1, R2, R2
	BNE loop
	RET
