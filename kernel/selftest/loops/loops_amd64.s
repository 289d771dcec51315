#include "textflag.h"

// RNG steps the xorshift64 state in R8 (R12 scratch): no branch, no call.
#define RNG MOVQ R8, R12; SHLQ $13, R12; XORQ R12, R8; MOVQ R8, R12; SHRQ $7, R12; XORQ R12, R8; MOVQ R8, R12; SHLQ $17, R12; XORQ R12, R8

// Registers: AX temp, CX size, R8 rng state, R9 gv1, R10 gv2.
#define PROLOGUE MOVQ size+0(FP), CX; XORQ AX, AX; MOVQ $0x9E3779B97F4A7C15, R8; XORQ R9, R9; XORQ R10, R10
#define EPILOGUE MOVQ R9, gv1+8(FP); MOVQ R10, gv2+16(FP); RET

// func InstrLoop(n uint64) uint64
TEXT ·InstrLoop(SB), NOSPLIT, $0-16
	MOVQ n+0(FP), CX
	MOVQ $0, AX
instrloop:
	ADDQ $1, AX
	CMPQ AX, CX
	JNE  instrloop
	MOVQ AX, ret+8(FP)
	RET

// func Branch1(size uint64) (gv1, gv2 uint64)
TEXT ·Branch1(SB), NOSPLIT, $0-24
	PROLOGUE
	MOVQ CX, DX
	SHRQ $1, DX
loop1:
	CMPQ AX, DX
	JAE  skip1
	ADDQ $2, R10
skip1:
	RNG
	INCQ AX
	CMPQ AX, CX
	JB   loop1
	EPILOGUE

// func Branch2(size uint64) (gv1, gv2 uint64)
TEXT ·Branch2(SB), NOSPLIT, $0-24
	PROLOGUE
loop2:
	ADDQ $2, R10
	CMPQ AX, R10
	JAE  skip2
	ADDQ $2, R9
skip2:
	RNG
	INCQ AX
	CMPQ AX, CX
	JB   loop2
	EPILOGUE

// func Branch3(size uint64) (gv1, gv2 uint64)
TEXT ·Branch3(SB), NOSPLIT, $0-24
	PROLOGUE
loop3:
	ADDQ $2, R10
	CMPQ AX, R10
	JBE  skip3
	ADDQ $2, R9
skip3:
	RNG
	INCQ AX
	CMPQ AX, CX
	JB   loop3
	EPILOGUE

// func Branch4(size uint64) (gv1, gv2 uint64)
TEXT ·Branch4(SB), NOSPLIT, $0-24
	PROLOGUE
loop4:
	RNG
	ADDQ  $2, R10
	TESTQ $1, R8
	JNE   skip4
	ADDQ  $2, R9
skip4:
	RNG
	INCQ  AX
	CMPQ  AX, CX
	JB    loop4
	EPILOGUE

// func Branch5(size uint64) (gv1, gv2 uint64)
TEXT ·Branch5(SB), NOSPLIT, $0-24
	PROLOGUE
loop5:
	RNG
	ADDQ  $2, R10
	TESTQ $1, R8
	JNE   skip5
	ADDQ  $2, R9
skip5:
	INCQ  AX
	CMPQ  AX, CX
	JB    loop5
	EPILOGUE

// func Branch6(size uint64) (gv1, gv2 uint64)
TEXT ·Branch6(SB), NOSPLIT, $0-24
	PROLOGUE
	MOVQ CX, R10
	INCQ R10
loop6:
	CMPQ AX, R10
	JAE  else6
	ADDQ $2, R9
	JMP  zz6
else6:
	RNG
zz6:
	INCQ AX
	RNG
	CMPQ AX, CX
	JB   loop6
	EPILOGUE

// func Branch7(size uint64) (gv1, gv2 uint64)
TEXT ·Branch7(SB), NOSPLIT, $0-24
	PROLOGUE
loop7:
	ADDQ $2, R10
	INCQ AX
	CMPQ AX, CX
	JB   loop7
	EPILOGUE
