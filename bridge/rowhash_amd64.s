//go:build !purego

#include "textflag.h"

DATA hashK<>+0(SB)/4, $0x00ffffff // pixel mask: B, G, R
DATA hashK<>+4(SB)/4, $16777619   // FNV-1a's 32-bit prime
DATA hashK<>+8(SB)/4, $2166136261
DATA hashK<>+12(SB)/4, $2166136262
DATA hashK<>+16(SB)/4, $2166136263
DATA hashK<>+20(SB)/4, $2166136264
DATA hashK<>+24(SB)/4, $2166136265
DATA hashK<>+28(SB)/4, $2166136266
DATA hashK<>+32(SB)/4, $2166136267
DATA hashK<>+36(SB)/4, $2166136268
GLOBL hashK<>(SB), RODATA|NOPTR, $40

// STEP folds the eight pixels at off(SI) into accumulator A.
#define STEP(off, A) \
	VPAND   off(SI), Y15, Y8; \
	VPXOR   Y8, A, A; \
	VPMULLD Y14, A, A

// func hashLanesAVX2(p *byte, n int, lanes *[8]uint32)
TEXT ·hashLanesAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ lanes+16(FP), DI
	VPBROADCASTD hashK<>+0(SB), Y15
	VPBROADCASTD hashK<>+4(SB), Y14
	// eight accumulators, seeded apart: 2166136261 + k
	VPBROADCASTD hashK<>+8(SB), Y0
	VPBROADCASTD hashK<>+12(SB), Y1
	VPBROADCASTD hashK<>+16(SB), Y2
	VPBROADCASTD hashK<>+20(SB), Y3
	VPBROADCASTD hashK<>+24(SB), Y4
	VPBROADCASTD hashK<>+28(SB), Y5
	VPBROADCASTD hashK<>+32(SB), Y6
	VPBROADCASTD hashK<>+36(SB), Y7

big:
	CMPQ CX, $256
	JLT  small
	STEP(0, Y0)
	STEP(32, Y1)
	STEP(64, Y2)
	STEP(96, Y3)
	STEP(128, Y4)
	STEP(160, Y5)
	STEP(192, Y6)
	STEP(224, Y7)
	ADDQ $256, SI
	SUBQ $256, CX
	JMP  big

small:
	CMPQ CX, $32
	JLT  fold
	STEP(0, Y0)
	ADDQ $32, SI
	SUBQ $32, CX
	JMP  small

fold:
	VPMULLD Y14, Y0, Y0
	VPXOR   Y1, Y0, Y0
	VPMULLD Y14, Y0, Y0
	VPXOR   Y2, Y0, Y0
	VPMULLD Y14, Y0, Y0
	VPXOR   Y3, Y0, Y0
	VPMULLD Y14, Y0, Y0
	VPXOR   Y4, Y0, Y0
	VPMULLD Y14, Y0, Y0
	VPXOR   Y5, Y0, Y0
	VPMULLD Y14, Y0, Y0
	VPXOR   Y6, Y0, Y0
	VPMULLD Y14, Y0, Y0
	VPXOR   Y7, Y0, Y0
	VMOVDQU Y0, (DI)
	VZEROUPPER
	RET
