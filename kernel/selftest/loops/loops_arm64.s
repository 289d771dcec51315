#include "textflag.h"

// RNG steps the xorshift64 state in R3 (R6 scratch): no branch, no call.
#define RNG LSL $13, R3, R6; EOR R6, R3, R3; LSR $7, R3, R6; EOR R6, R3, R3; LSL $17, R3, R6; EOR R6, R3, R3

// Registers: R0 temp, R1 size, R3 rng state, R4 gv1, R5 gv2.
#define PROLOGUE MOVD size+0(FP), R1; MOVD $0, R0; MOVD $0x9E3779B97F4A7C15, R3; MOVD $0, R4; MOVD $0, R5
#define EPILOGUE MOVD R4, gv1+8(FP); MOVD R5, gv2+16(FP); RET

// func InstrLoop(n uint64) uint64
TEXT ·InstrLoop(SB), NOSPLIT, $0-16
	MOVD n+0(FP), R1
	MOVD $0, R0
instrloop:
	ADD  $1, R0, R0
	CMP  R1, R0
	BNE  instrloop
	MOVD R0, ret+8(FP)
	RET

// func Branch1(size uint64) (gv1, gv2 uint64)
TEXT ·Branch1(SB), NOSPLIT, $0-24
	PROLOGUE
	LSR $1, R1, R2
loop1:
	CMP R2, R0
	BHS skip1
	ADD $2, R5, R5
skip1:
	RNG
	ADD $1, R0, R0
	CMP R1, R0
	BLO loop1
	EPILOGUE

// func Branch2(size uint64) (gv1, gv2 uint64)
TEXT ·Branch2(SB), NOSPLIT, $0-24
	PROLOGUE
loop2:
	ADD $2, R5, R5
	CMP R5, R0
	BHS skip2
	ADD $2, R4, R4
skip2:
	RNG
	ADD $1, R0, R0
	CMP R1, R0
	BLO loop2
	EPILOGUE

// func Branch3(size uint64) (gv1, gv2 uint64)
TEXT ·Branch3(SB), NOSPLIT, $0-24
	PROLOGUE
loop3:
	ADD $2, R5, R5
	CMP R5, R0
	BLS skip3
	ADD $2, R4, R4
skip3:
	RNG
	ADD $1, R0, R0
	CMP R1, R0
	BLO loop3
	EPILOGUE

// func Branch4(size uint64) (gv1, gv2 uint64)
TEXT ·Branch4(SB), NOSPLIT, $0-24
	PROLOGUE
loop4:
	RNG
	ADD $2, R5, R5
	TST $1, R3
	BNE skip4
	ADD $2, R4, R4
skip4:
	RNG
	ADD $1, R0, R0
	CMP R1, R0
	BLO loop4
	EPILOGUE

// func Branch5(size uint64) (gv1, gv2 uint64)
TEXT ·Branch5(SB), NOSPLIT, $0-24
	PROLOGUE
loop5:
	RNG
	ADD $2, R5, R5
	TST $1, R3
	BNE skip5
	ADD $2, R4, R4
skip5:
	ADD $1, R0, R0
	CMP R1, R0
	BLO loop5
	EPILOGUE

// func Branch6(size uint64) (gv1, gv2 uint64)
TEXT ·Branch6(SB), NOSPLIT, $0-24
	PROLOGUE
	ADD $1, R1, R5
loop6:
	CMP R5, R0
	BHS else6
	ADD $2, R4, R4
	B   zz6
else6:
	RNG
zz6:
	ADD $1, R0, R0
	RNG
	CMP R1, R0
	BLO loop6
	EPILOGUE

// func Branch7(size uint64) (gv1, gv2 uint64)
TEXT ·Branch7(SB), NOSPLIT, $0-24
	PROLOGUE
loop7:
	ADD $2, R5, R5
	ADD $1, R0, R0
	CMP R1, R0
	BLO loop7
	EPILOGUE
