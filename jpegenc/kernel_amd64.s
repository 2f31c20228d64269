//go:build !purego

#include "textflag.h"

// AVX2 kernels of kernel.go: the same integer arithmetic, eight
// 32-bit lanes at a time.

// Broadcast constants, 32 bytes each.
#define K8(off, v) DATA consts<>+(off)(SB)/4, $v; DATA consts<>+(off+4)(SB)/4, $v; DATA consts<>+(off+8)(SB)/4, $v; DATA consts<>+(off+12)(SB)/4, $v; DATA consts<>+(off+16)(SB)/4, $v; DATA consts<>+(off+20)(SB)/4, $v; DATA consts<>+(off+24)(SB)/4, $v; DATA consts<>+(off+28)(SB)/4, $v

K8(0, 0xff)
K8(32, 19595)     // yR
K8(64, 38470)     // yG
K8(96, 7471)      // yB
K8(128, -8380416) // yBias = 1<<13 - 128<<16
K8(160, -11059)   // cbR
K8(192, -21709)   // cbG
K8(224, 32768)    // cBias = 1<<15
K8(256, -27439)   // crG
K8(288, -5329)    // crB
K8(320, 4096)     // rounding of the DCT's multiplies (1<<12)
K8(352, 3135)     // fix0382
K8(384, 4433)     // fix0541
K8(416, 5793)     // fix0707
K8(448, 10703)    // fix1306
GLOBL consts<>(SB), RODATA|NOPTR, $480

// PIX loads eight BGRX pixels from src into B, G, R (one byte a lane).
#define PIX(src, B, G, R) \
	VMOVDQU src, R; \
	VPAND   Y15, R, B; \
	VPSRLD  $8, R, G; \
	VPAND   Y15, G, G; \
	VPSRLD  $16, R, R; \
	VPAND   Y15, R, R

// LUMA stores the eight luma values of B, G, R at dst; T, U are scratch.
#define LUMA(B, G, R, T, U, dst) \
	VPMULLD consts<>+32(SB), R, T; \
	VPMULLD consts<>+64(SB), G, U; \
	VPADDD  U, T, T; \
	VPMULLD consts<>+96(SB), B, U; \
	VPADDD  U, T, T; \
	VPADDD  consts<>+128(SB), T, T; \
	VPSRAD  $14, T, T; \
	VMOVDQU T, dst

// HALF stores the luma of eight columns (at byte off of both rows at SI,
// SI+DX) in the two rows of a luma block at dst(AX), and leaves the sums
// of B, G, R over the two rows in B0, G0, R0 (B1, G1, R1 are scratch).
#define HALF(off, dst, B0, G0, R0, B1, G1, R1) \
	PIX(off(SI), B0, G0, R0); \
	LUMA(B0, G0, R0, Y12, Y13, dst(AX)); \
	PIX(off(SI)(DX*1), B1, G1, R1); \
	LUMA(B1, G1, R1, Y12, Y13, dst+32(AX)); \
	VPADDD B1, B0, B0; \
	VPADDD G1, G0, G0; \
	VPADDD R1, R0, R0

// func loadAVX2(dst *[6][64]int32, pix *byte, stride int)
TEXT ·loadAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ pix+8(FP), SI
	MOVQ stride+16(FP), DX
	VMOVDQU consts<>+0(SB), Y15
	XORQ CX, CX // pair of rows, 0..7

pair:
	// AX: row 2·CX of the left luma block, (CX/4)·512 + (CX%4)·64 bytes in
	MOVQ CX, AX
	SHRQ $2, AX
	SHLQ $9, AX
	MOVQ CX, BX
	ANDQ $3, BX
	SHLQ $6, BX
	ADDQ BX, AX
	ADDQ DI, AX

	HALF(0, 0, Y0, Y1, Y2, Y3, Y4, Y5)     // left eight columns: Y0-Y2 the sums
	HALF(32, 256, Y3, Y4, Y5, Y6, Y7, Y8)  // right eight (the next luma block): Y3-Y5

	// sums of horizontal pairs, back in column order
	VPHADDD Y3, Y0, Y0
	VPHADDD Y4, Y1, Y1
	VPHADDD Y5, Y2, Y2
	VPERMQ  $0xd8, Y0, Y0 // bb
	VPERMQ  $0xd8, Y1, Y1 // gg
	VPERMQ  $0xd8, Y2, Y2 // rr

	// BX: row CX of Cb
	MOVQ CX, BX
	SHLQ $5, BX
	ADDQ DI, BX

	VPMULLD consts<>+160(SB), Y2, Y6
	VPMULLD consts<>+192(SB), Y1, Y7
	VPADDD  Y7, Y6, Y6
	VPSLLD  $15, Y0, Y7
	VPADDD  Y7, Y6, Y6
	VPADDD  consts<>+224(SB), Y6, Y6
	VPSRAD  $16, Y6, Y6
	VMOVDQU Y6, 1024(BX)

	VPSLLD  $15, Y2, Y6
	VPMULLD consts<>+256(SB), Y1, Y7
	VPADDD  Y7, Y6, Y6
	VPMULLD consts<>+288(SB), Y0, Y7
	VPADDD  Y7, Y6, Y6
	VPADDD  consts<>+224(SB), Y6, Y6
	VPSRAD  $16, Y6, Y6
	VMOVDQU Y6, 1280(BX)

	LEAQ (SI)(DX*2), SI
	INCQ CX
	CMPQ CX, $8
	JLT  pair
	VZEROUPPER
	RET

// MUL is mul(R, c) in place: (R·c + 1<<12) >> 13.
#define MUL(c, R) \
	VPMULLD c, R, R; \
	VPADDD  consts<>+320(SB), R, R; \
	VPSRAD  $13, R, R

// PASS is one AAN pass down the columns of Y0-Y7 (row i in Yi), as in
// fdct; outputs 0-7 land in Y9, Y1, Y11, Y14, Y10, Y13, Y12, Y4.
#define PASS \
	VPADDD Y7, Y0, Y8; \
	VPSUBD Y7, Y0, Y7; \
	VPADDD Y6, Y1, Y0; \
	VPSUBD Y6, Y1, Y6; \
	VPADDD Y5, Y2, Y1; \
	VPSUBD Y5, Y2, Y5; \
	VPADDD Y4, Y3, Y2; \
	VPSUBD Y4, Y3, Y4; \
	VPADDD Y2, Y8, Y3; \
	VPSUBD Y2, Y8, Y8; \
	VPADDD Y1, Y0, Y2; \
	VPSUBD Y1, Y0, Y0; \
	VPADDD Y2, Y3, Y9; \
	VPSUBD Y2, Y3, Y10; \
	VPADDD Y8, Y0, Y0; \
	MUL(consts<>+416(SB), Y0); \
	VPADDD Y0, Y8, Y11; \
	VPSUBD Y0, Y8, Y12; \
	VPADDD Y5, Y4, Y0; \
	VPADDD Y6, Y5, Y1; \
	VPADDD Y7, Y6, Y2; \
	VPSUBD Y2, Y0, Y3; \
	MUL(consts<>+352(SB), Y3); \
	MUL(consts<>+384(SB), Y0); \
	VPADDD Y3, Y0, Y0; \
	MUL(consts<>+448(SB), Y2); \
	VPADDD Y3, Y2, Y2; \
	MUL(consts<>+416(SB), Y1); \
	VPADDD Y1, Y7, Y3; \
	VPSUBD Y1, Y7, Y8; \
	VPADDD Y0, Y8, Y13; \
	VPSUBD Y0, Y8, Y14; \
	VPADDD Y2, Y3, Y1; \
	VPSUBD Y2, Y3, Y4

// QUANT quantises the eight values of R with the reciprocals at
// off(DX), stores them at off(DI) and ORs the zero lanes' bits into AX
// at bit n. Y15 is zero.
#define QUANT(R, off, n) \
	VCVTDQ2PS R, R; \
	VMULPS    off(DX), R, R; \
	VCVTPS2DQ R, R; \
	VMOVDQU   R, off(DI); \
	VPCMPEQD  Y15, R, R; \
	VMOVMSKPS R, BX; \
	SHLQ      $n, BX; \
	ORQ       BX, AX

// func fdctQuantAVX2(b *[64]int32, recip *[64]float32, out *[64]int32) uint64
TEXT ·fdctQuantAVX2(SB), NOSPLIT, $0-32
	MOVQ b+0(FP), SI
	MOVQ recip+8(FP), DX
	MOVQ out+16(FP), DI
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVDQU 128(SI), Y4
	VMOVDQU 160(SI), Y5
	VMOVDQU 192(SI), Y6
	VMOVDQU 224(SI), Y7

	PASS
	// outputs back to Y0-Y7 (Y7 first: Y4 holds output 7)
	VMOVDQU Y4, Y7
	VMOVDQU Y9, Y0
	VMOVDQU Y11, Y2
	VMOVDQU Y14, Y3
	VMOVDQU Y10, Y4
	VMOVDQU Y13, Y5
	VMOVDQU Y12, Y6

	// transpose: Yi becomes column i
	VPUNPCKLDQ Y1, Y0, Y8
	VPUNPCKHDQ Y1, Y0, Y9
	VPUNPCKLDQ Y3, Y2, Y10
	VPUNPCKHDQ Y3, Y2, Y11
	VPUNPCKLDQ Y5, Y4, Y12
	VPUNPCKHDQ Y5, Y4, Y13
	VPUNPCKLDQ Y7, Y6, Y14
	VPUNPCKHDQ Y7, Y6, Y15
	VPUNPCKLQDQ Y10, Y8, Y0
	VPUNPCKHQDQ Y10, Y8, Y1
	VPUNPCKLQDQ Y11, Y9, Y2
	VPUNPCKHQDQ Y11, Y9, Y3
	VPUNPCKLQDQ Y14, Y12, Y4
	VPUNPCKHQDQ Y14, Y12, Y5
	VPUNPCKLQDQ Y15, Y13, Y6
	VPUNPCKHQDQ Y15, Y13, Y7
	VPERM2I128 $0x31, Y4, Y0, Y12
	VPERM2I128 $0x20, Y4, Y0, Y0
	VPERM2I128 $0x31, Y5, Y1, Y13
	VPERM2I128 $0x20, Y5, Y1, Y1
	VPERM2I128 $0x31, Y6, Y2, Y14
	VPERM2I128 $0x20, Y6, Y2, Y2
	VPERM2I128 $0x31, Y7, Y3, Y15
	VPERM2I128 $0x20, Y7, Y3, Y3
	VMOVDQU Y12, Y4
	VMOVDQU Y13, Y5
	VMOVDQU Y14, Y6
	VMOVDQU Y15, Y7

	PASS

	// Yk holds horizontal frequency k of the eight vertical ones: row k of out
	VPXOR Y15, Y15, Y15
	XORQ  AX, AX
	QUANT(Y9, 0, 0)
	QUANT(Y1, 32, 8)
	QUANT(Y11, 64, 16)
	QUANT(Y14, 96, 24)
	QUANT(Y10, 128, 32)
	QUANT(Y13, 160, 40)
	QUANT(Y12, 192, 48)
	QUANT(Y4, 224, 56)
	NOTQ AX
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
