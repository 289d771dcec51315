#include "textflag.h"

// func StoreLoop(p *uint64, n int)
TEXT ·StoreLoop(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	XORQ DX, DX
storeloop:
	CMPQ DX, CX
	JGE  storedone
	MOVQ DX, (AX)
	INCQ DX
	JMP  storeloop
storedone:
	RET

// func LoadLoop(p *uint64, n int) uint64
TEXT ·LoadLoop(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	XORQ DX, DX
	XORQ R8, R8
loadloop:
	CMPQ DX, CX
	JGE  loaddone
	MOVQ (AX), BX
	ADDQ BX, R8
	INCQ DX
	JMP  loadloop
loaddone:
	MOVQ R8, ret+16(FP)
	RET
