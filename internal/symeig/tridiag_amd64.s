#include "textflag.h"

// FOLD sums the lanes of Ya and Yb into the low element of Xa, as
// ((c0+c2)+(c1+c3)) with c_l = a_l + b_l; Xt is scratch.
#define FOLD(Ya, Yb, Xa, Xt) \
	VADDPD       Yb, Ya, Ya; \
	VEXTRACTF128 $1, Ya, Xt; \
	VADDPD       Xt, Xa, Xa; \
	VPERMILPD    $1, Xa, Xt; \
	VADDSD       Xt, Xa, Xa

// The row kernels of tridiag.go; symvRows2Go and reflectRowGo are their
// Go forms, to the bit. A dot product keeps two accumulators of four lanes
// (Y0: terms 8q+0…3, Y1: 8q+4…7), then lanes 0–3 take four more terms if
// there are, Y0+Y1 is folded to a scalar as ((c0+c2)+(c1+c3)), and the
// last terms are added one at a time.

// HALF updates four columns (from byte offset o) of the two rows, adds
// their shares to y and their products with v to the sums Aa (row i) and
// Ab (row i+1). Every load comes before the stores: rows of a 512-wide
// matrix are 4 KiB apart, and a load at a just-stored offset modulo 4 KiB
// would wait for the store (4K aliasing).
#define HALF(o, Aa, Ab) \
	VMOVUPD      o(CX)(R8*8), Y4; \
	VMOVUPD      o(BX)(R8*8), Y5; \
	VMOVUPD      o(AX)(R8*8), Y6; \
	VMOVUPD      o(R10)(R8*8), Y7; \
	VMOVUPD      o(SI)(R8*8), Y8; \
	VMOVUPD      o(DX)(R8*8), Y9; \
	VFNMADD231PD Y4, Y10, Y6; \
	VFNMADD231PD Y5, Y11, Y6; \
	VFNMADD231PD Y4, Y13, Y7; \
	VFNMADD231PD Y5, Y14, Y7; \
	VFMADD231PD  Y12, Y6, Y8; \
	VFMADD231PD  Y15, Y7, Y8; \
	VFMADD231PD  Y9, Y6, Aa; \
	VFMADD231PD  Y9, Y7, Ab; \
	VMOVUPD      Y6, o(AX)(R8*8); \
	VMOVUPD      Y7, o(R10)(R8*8); \
	VMOVUPD      Y8, o(SI)(R8*8)

// func symvRows2AVX2(a0, a1, vp, wp, v, y *float64, n int, vpi, wpi, vi, vpi1, wpi1, vi1 float64) (h0, h1 float64)
TEXT ·symvRows2AVX2(SB), NOSPLIT, $0-120
	MOVQ a0+0(FP), AX
	MOVQ a1+8(FP), R10
	MOVQ vp+16(FP), BX
	MOVQ wp+24(FP), CX
	MOVQ v+32(FP), DX
	MOVQ y+40(FP), SI
	MOVQ n+48(FP), DI
	VBROADCASTSD vpi+56(FP), Y10
	VBROADCASTSD wpi+64(FP), Y11
	VBROADCASTSD vi+72(FP), Y12
	VBROADCASTSD vpi1+80(FP), Y13
	VBROADCASTSD wpi1+88(FP), Y14
	VBROADCASTSD vi1+96(FP), Y15
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	XORQ R8, R8

sv8:
	LEAQ 8(R8), R9
	CMPQ R9, DI
	JGT  sv4
	HALF(0, Y0, Y2)
	HALF(32, Y1, Y3)
	MOVQ R9, R8
	JMP  sv8

sv4:
	LEAQ 4(R8), R9
	CMPQ R9, DI
	JGT  svfold
	HALF(0, Y0, Y2)
	MOVQ R9, R8

svfold:
	FOLD(Y0, Y1, X0, X9)
	FOLD(Y2, Y3, X2, X9)

sv1:
	CMPQ R8, DI
	JGE  svdone
	VMOVSD       (CX)(R8*8), X4
	VMOVSD       (BX)(R8*8), X5
	VMOVSD       (AX)(R8*8), X6
	VMOVSD       (R10)(R8*8), X7
	VMOVSD       (SI)(R8*8), X8
	VMOVSD       (DX)(R8*8), X9
	VFNMADD231SD X4, X10, X6
	VFNMADD231SD X5, X11, X6
	VFNMADD231SD X4, X13, X7
	VFNMADD231SD X5, X14, X7
	VFMADD231SD  X12, X6, X8
	VFMADD231SD  X15, X7, X8
	VFMADD231SD  X9, X6, X0
	VFMADD231SD  X9, X7, X2
	VMOVSD       X6, (AX)(R8*8)
	VMOVSD       X7, (R10)(R8*8)
	VMOVSD       X8, (SI)(R8*8)
	INCQ R8
	JMP  sv1

svdone:
	VMOVSD X0, h0+104(FP)
	VMOVSD X2, h1+112(FP)
	VZEROUPPER
	RET

// func reflectRowAVX2(z, v *float64, n int, tau float64)
TEXT ·reflectRowAVX2(SB), NOSPLIT, $0-32
	MOVQ z+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	XORQ R8, R8

rd8:
	LEAQ 8(R8), R9
	CMPQ R9, CX
	JGT  rd4
	VMOVUPD (DI)(R8*8), Y2
	VMOVUPD 32(DI)(R8*8), Y3
	VFMADD231PD (SI)(R8*8), Y2, Y0
	VFMADD231PD 32(SI)(R8*8), Y3, Y1
	MOVQ R9, R8
	JMP  rd8

rd4:
	LEAQ 4(R8), R9
	CMPQ R9, CX
	JGT  rdfold
	VMOVUPD (DI)(R8*8), Y2
	VFMADD231PD (SI)(R8*8), Y2, Y0
	MOVQ R9, R8

rdfold:
	FOLD(Y0, Y1, X0, X1)

rd1:
	CMPQ R8, CX
	JGE  raxpy
	VMOVSD (DI)(R8*8), X2
	VFMADD231SD (SI)(R8*8), X2, X0
	INCQ R8
	JMP  rd1

raxpy:
	// t = τ·dot; z ← z − t·v, which is fma(−t, v, z).
	VMULSD       tau+24(FP), X0, X0
	VBROADCASTSD X0, Y0
	XORQ         R8, R8

ra8:
	LEAQ 8(R8), R9
	CMPQ R9, CX
	JGT  ra4
	VMOVUPD (DI)(R8*8), Y2
	VMOVUPD 32(DI)(R8*8), Y3
	VFNMADD231PD (SI)(R8*8), Y0, Y2
	VFNMADD231PD 32(SI)(R8*8), Y0, Y3
	VMOVUPD Y2, (DI)(R8*8)
	VMOVUPD Y3, 32(DI)(R8*8)
	MOVQ R9, R8
	JMP  ra8

ra4:
	LEAQ 4(R8), R9
	CMPQ R9, CX
	JGT  ra1
	VMOVUPD (DI)(R8*8), Y2
	VFNMADD231PD (SI)(R8*8), Y0, Y2
	VMOVUPD Y2, (DI)(R8*8)
	MOVQ R9, R8

ra1:
	CMPQ R8, CX
	JGE  rdone
	VMOVSD (DI)(R8*8), X2
	VFNMADD231SD (SI)(R8*8), X0, X2
	VMOVSD X2, (DI)(R8*8)
	INCQ R8
	JMP  ra1

rdone:
	VZEROUPPER
	RET

// func reflectRows4AVX2(z *float64, ldz int, v *float64, n int, tau float64)
//
// reflectRowAVX2 on the four rows z, z+ldz, z+2·ldz, z+3·ldz (each row
// alone, to the same bits), which share the loads of v and keep eight
// independent sums.
TEXT ·reflectRows4AVX2(SB), NOSPLIT, $0-40
	MOVQ z+0(FP), DI
	MOVQ ldz+8(FP), AX
	SHLQ $3, AX
	LEAQ (DI)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	LEAQ (R11)(AX*1), R12
	MOVQ v+16(FP), SI
	MOVQ n+24(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
	XORQ R8, R8

qd8:
	LEAQ 8(R8), R9
	CMPQ R9, CX
	JGT  qd4
	VMOVUPD (SI)(R8*8), Y8
	VMOVUPD 32(SI)(R8*8), Y9
	VFMADD231PD (DI)(R8*8), Y8, Y0
	VFMADD231PD 32(DI)(R8*8), Y9, Y1
	VFMADD231PD (R10)(R8*8), Y8, Y2
	VFMADD231PD 32(R10)(R8*8), Y9, Y3
	VFMADD231PD (R11)(R8*8), Y8, Y4
	VFMADD231PD 32(R11)(R8*8), Y9, Y5
	VFMADD231PD (R12)(R8*8), Y8, Y6
	VFMADD231PD 32(R12)(R8*8), Y9, Y7
	MOVQ R9, R8
	JMP  qd8

qd4:
	LEAQ 4(R8), R9
	CMPQ R9, CX
	JGT  qdfold
	VMOVUPD (SI)(R8*8), Y8
	VFMADD231PD (DI)(R8*8), Y8, Y0
	VFMADD231PD (R10)(R8*8), Y8, Y2
	VFMADD231PD (R11)(R8*8), Y8, Y4
	VFMADD231PD (R12)(R8*8), Y8, Y6
	MOVQ R9, R8

qdfold:
	FOLD(Y0, Y1, X0, X9)
	FOLD(Y2, Y3, X2, X9)
	FOLD(Y4, Y5, X4, X9)
	FOLD(Y6, Y7, X6, X9)

qd1:
	CMPQ R8, CX
	JGE  qaxpy
	VMOVSD (SI)(R8*8), X8
	VFMADD231SD (DI)(R8*8), X8, X0
	VFMADD231SD (R10)(R8*8), X8, X2
	VFMADD231SD (R11)(R8*8), X8, X4
	VFMADD231SD (R12)(R8*8), X8, X6
	INCQ R8
	JMP  qd1

qaxpy:
	VMOVSD       tau+32(FP), X15
	VMULSD       X15, X0, X0
	VMULSD       X15, X2, X2
	VMULSD       X15, X4, X4
	VMULSD       X15, X6, X6
	VBROADCASTSD X0, Y0
	VBROADCASTSD X2, Y2
	VBROADCASTSD X4, Y4
	VBROADCASTSD X6, Y6
	XORQ         R8, R8

qa4:
	LEAQ 4(R8), R9
	CMPQ R9, CX
	JGT  qa1
	VMOVUPD (SI)(R8*8), Y8
	VMOVUPD (DI)(R8*8), Y10
	VMOVUPD (R10)(R8*8), Y11
	VMOVUPD (R11)(R8*8), Y12
	VMOVUPD (R12)(R8*8), Y13
	VFNMADD231PD Y8, Y0, Y10
	VFNMADD231PD Y8, Y2, Y11
	VFNMADD231PD Y8, Y4, Y12
	VFNMADD231PD Y8, Y6, Y13
	VMOVUPD Y10, (DI)(R8*8)
	VMOVUPD Y11, (R10)(R8*8)
	VMOVUPD Y12, (R11)(R8*8)
	VMOVUPD Y13, (R12)(R8*8)
	MOVQ R9, R8
	JMP  qa4

qa1:
	CMPQ R8, CX
	JGE  qdone
	VMOVSD (SI)(R8*8), X8
	VMOVSD (DI)(R8*8), X10
	VMOVSD (R10)(R8*8), X11
	VMOVSD (R11)(R8*8), X12
	VMOVSD (R12)(R8*8), X13
	VFNMADD231SD X8, X0, X10
	VFNMADD231SD X8, X2, X11
	VFNMADD231SD X8, X4, X12
	VFNMADD231SD X8, X6, X13
	VMOVSD X10, (DI)(R8*8)
	VMOVSD X11, (R10)(R8*8)
	VMOVSD X12, (R11)(R8*8)
	VMOVSD X13, (R12)(R8*8)
	INCQ R8
	JMP  qa1

qdone:
	VZEROUPPER
	RET
