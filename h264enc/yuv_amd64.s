//go:build !purego

#include "textflag.h"

// toI420's kernel (yuv.go): the same integer arithmetic, eight 32-bit
// lanes at a time; two rows of eight BGRX pixels in, eight luma bytes a
// row and four of each chroma plane out.

#define K8(off, v) DATA yuvc<>+(off)(SB)/4, $v; DATA yuvc<>+(off+4)(SB)/4, $v; DATA yuvc<>+(off+8)(SB)/4, $v; DATA yuvc<>+(off+12)(SB)/4, $v; DATA yuvc<>+(off+16)(SB)/4, $v; DATA yuvc<>+(off+20)(SB)/4, $v; DATA yuvc<>+(off+24)(SB)/4, $v; DATA yuvc<>+(off+28)(SB)/4, $v

K8(0, 0xff)
K8(32, 11966)    // yR
K8(64, 40254)    // yG
K8(96, 4064)     // yB
K8(128, 1081344) // 16<<16 + 1<<15
K8(160, -6596)   // cbR
K8(192, -22189)  // cbG
K8(224, 28784)   // cbB = crR
K8(256, -26145)  // crG
K8(288, -2639)   // crB
K8(320, 33685504) // 128<<18 + 1<<17
// Lane orders for VPERMD: luma's packed dwords 0 and 4 first; the
// chroma sums at 0, 1, 4, 5 first.
DATA yuvc<>+352(SB)/4, $0
DATA yuvc<>+356(SB)/4, $4
DATA yuvc<>+360(SB)/4, $0
DATA yuvc<>+364(SB)/4, $0
DATA yuvc<>+368(SB)/4, $0
DATA yuvc<>+372(SB)/4, $0
DATA yuvc<>+376(SB)/4, $0
DATA yuvc<>+380(SB)/4, $0
DATA yuvc<>+384(SB)/4, $0
DATA yuvc<>+388(SB)/4, $1
DATA yuvc<>+392(SB)/4, $4
DATA yuvc<>+396(SB)/4, $5
DATA yuvc<>+400(SB)/4, $0
DATA yuvc<>+404(SB)/4, $0
DATA yuvc<>+408(SB)/4, $0
DATA yuvc<>+412(SB)/4, $0
GLOBL yuvc<>(SB), RODATA|NOPTR, $416

// SPLIT takes eight BGRX pixels from src into B, G, R (a byte a lane).
#define SPLIT(src, B, G, R) \
	VMOVDQU src, R; \
	VPAND   Y15, R, B; \
	VPSRLD  $8, R, G; \
	VPAND   Y15, G, G; \
	VPSRLD  $16, R, R; \
	VPAND   Y15, R, R

// LUMA stores the luma of B, G, R as eight bytes at dst; T (TX its low
// half), U scratch.
#define LUMA(B, G, R, T, TX, U, dst) \
	VPMULLD Y14, R, T; \
	VPMULLD Y13, G, U; \
	VPADDD  U, T, T; \
	VPMULLD Y12, B, U; \
	VPADDD  U, T, T; \
	VPADDD  Y11, T, T; \
	VPSRAD  $16, T, T; \
	VPACKUSDW T, T, T; \
	VPACKUSWB T, T, T; \
	VPERMD  T, Y10, T; \
	VMOVQ   TX, dst

// CHROMA stores four chroma bytes at dst from the 2x2 sums B, G, R
// (VPHADDD'd: valid in lanes 0, 1, 4, 5) with coefficients cr, cg, cb.
#define CHROMA(cr, cg, cb, B, G, R, T, TX, U, dst) \
	VPMULLD cr, R, T; \
	VPMULLD cg, G, U; \
	VPADDD  U, T, T; \
	VPMULLD cb, B, U; \
	VPADDD  U, T, T; \
	VPADDD  yuvc<>+320(SB), T, T; \
	VPSRAD  $18, T, T; \
	VPERMD  T, Y9, T; \
	VPACKUSDW T, T, T; \
	VPACKUSWB T, T, T; \
	VMOVD   TX, dst

// func i420RowsAVX2(y0, y1, cb, cr, r0, r1 *byte, groups int)
TEXT ·i420RowsAVX2(SB), NOSPLIT, $0-56
	MOVQ y0+0(FP), DI
	MOVQ y1+8(FP), R8
	MOVQ cb+16(FP), R9
	MOVQ cr+24(FP), R10
	MOVQ r0+32(FP), SI
	MOVQ r1+40(FP), DX
	MOVQ groups+48(FP), CX
	VMOVDQU yuvc<>+0(SB), Y15
	VMOVDQU yuvc<>+32(SB), Y14
	VMOVDQU yuvc<>+64(SB), Y13
	VMOVDQU yuvc<>+96(SB), Y12
	VMOVDQU yuvc<>+128(SB), Y11
	VMOVDQU yuvc<>+352(SB), Y10
	VMOVDQU yuvc<>+384(SB), Y9

loop:
	TESTQ CX, CX
	JZ    done
	SPLIT((SI), Y0, Y1, Y2)
	LUMA(Y0, Y1, Y2, Y6, X6, Y7, (DI))
	SPLIT((DX), Y3, Y4, Y5)
	LUMA(Y3, Y4, Y5, Y6, X6, Y7, (R8))
	VPADDD  Y3, Y0, Y0
	VPADDD  Y4, Y1, Y1
	VPADDD  Y5, Y2, Y2
	VPHADDD Y0, Y0, Y0
	VPHADDD Y1, Y1, Y1
	VPHADDD Y2, Y2, Y2
	CHROMA(yuvc<>+160(SB), yuvc<>+192(SB), yuvc<>+224(SB), Y0, Y1, Y2, Y6, X6, Y7, (R9))
	CHROMA(yuvc<>+224(SB), yuvc<>+256(SB), yuvc<>+288(SB), Y0, Y1, Y2, Y6, X6, Y7, (R10))
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $8, DI
	ADDQ $8, R8
	ADDQ $4, R9
	ADDQ $4, R10
	DECQ CX
	JMP  loop

done:
	VZEROUPPER
	RET
