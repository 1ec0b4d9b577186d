#include "textflag.h"

// func rotateSweepAVX(z *float64, stride, count, width int, cs, sn *float64)
//
// For r = count−1 down to 0, with c = cs[r], s = sn[r], x = row r and
// y = row r+1 of the width columns at z (rows stride elements apart):
// y ← s·x + c·y, x ← c·x − s·y, each product rounded before the sum, as
// rotateSweepGo does.
TEXT ·rotateSweepAVX(SB), NOSPLIT, $0-48
	MOVQ z+0(FP), DI
	MOVQ stride+8(FP), SI
	SHLQ $3, SI                 // stride in bytes
	MOVQ count+16(FP), CX
	MOVQ width+24(FP), DX
	MOVQ cs+32(FP), R8
	MOVQ sn+40(FP), R9
	MOVQ DX, R12
	ANDQ $-8, R12               // the columns done eight at a time
	DECQ CX                     // r = count−1
	MOVQ CX, AX
	IMULQ SI, AX
	LEAQ (DI)(AX*1), R10        // row r

rotation:
	CMPQ CX, $0
	JL   done
	VBROADCASTSD (R8)(CX*8), Y14 // c
	VBROADCASTSD (R9)(CX*8), Y15 // s
	LEAQ (R10)(SI*1), R11        // row r+1
	XORQ BX, BX

eight:
	CMPQ BX, R12
	JGE  one
	VMOVUPD (R10)(BX*8), Y0      // x
	VMOVUPD 32(R10)(BX*8), Y1
	VMOVUPD (R11)(BX*8), Y2      // y
	VMOVUPD 32(R11)(BX*8), Y3
	VMULPD  Y15, Y0, Y4          // s·x
	VMULPD  Y14, Y2, Y5          // c·y
	VMULPD  Y14, Y0, Y6          // c·x
	VMULPD  Y15, Y2, Y7          // s·y
	VMULPD  Y15, Y1, Y8
	VMULPD  Y14, Y3, Y9
	VMULPD  Y14, Y1, Y10
	VMULPD  Y15, Y3, Y11
	VADDPD  Y5, Y4, Y4           // s·x + c·y
	VSUBPD  Y7, Y6, Y6           // c·x − s·y
	VADDPD  Y9, Y8, Y8
	VSUBPD  Y11, Y10, Y10
	VMOVUPD Y4, (R11)(BX*8)
	VMOVUPD Y8, 32(R11)(BX*8)
	VMOVUPD Y6, (R10)(BX*8)
	VMOVUPD Y10, 32(R10)(BX*8)
	ADDQ    $8, BX
	JMP     eight

one:
	CMPQ BX, DX
	JGE  next
	VMOVSD (R10)(BX*8), X0
	VMOVSD (R11)(BX*8), X2
	VMULSD X15, X0, X4
	VMULSD X14, X2, X5
	VMULSD X14, X0, X6
	VMULSD X15, X2, X7
	VADDSD X5, X4, X4
	VSUBSD X7, X6, X6
	VMOVSD X4, (R11)(BX*8)
	VMOVSD X6, (R10)(BX*8)
	INCQ   BX
	JMP    one

next:
	SUBQ SI, R10
	DECQ CX
	JMP  rotation

done:
	VZEROUPPER
	RET

// func rotateSweepAVX512(z *float64, stride, count, width int, cs, sn *float64)
//
// rotateSweepAVX with 512-bit vectors: sixteen columns at a time.
TEXT ·rotateSweepAVX512(SB), NOSPLIT, $0-48
	MOVQ z+0(FP), DI
	MOVQ stride+8(FP), SI
	SHLQ $3, SI                 // stride in bytes
	MOVQ count+16(FP), CX
	MOVQ width+24(FP), DX
	MOVQ cs+32(FP), R8
	MOVQ sn+40(FP), R9
	MOVQ DX, R12
	ANDQ $-16, R12              // the columns done sixteen at a time
	DECQ CX                     // r = count−1
	MOVQ CX, AX
	IMULQ SI, AX
	LEAQ (DI)(AX*1), R10        // row r

rotation:
	CMPQ CX, $0
	JL   done
	VBROADCASTSD (R8)(CX*8), Z14 // c
	VBROADCASTSD (R9)(CX*8), Z15 // s
	LEAQ (R10)(SI*1), R11        // row r+1
	XORQ BX, BX

sixteen:
	CMPQ BX, R12
	JGE  one
	VMOVUPD (R10)(BX*8), Z0      // x
	VMOVUPD 64(R10)(BX*8), Z1
	VMOVUPD (R11)(BX*8), Z2      // y
	VMOVUPD 64(R11)(BX*8), Z3
	VMULPD  Z15, Z0, Z4          // s·x
	VMULPD  Z14, Z2, Z5          // c·y
	VMULPD  Z14, Z0, Z6          // c·x
	VMULPD  Z15, Z2, Z7          // s·y
	VMULPD  Z15, Z1, Z8
	VMULPD  Z14, Z3, Z9
	VMULPD  Z14, Z1, Z10
	VMULPD  Z15, Z3, Z11
	VADDPD  Z5, Z4, Z4           // s·x + c·y
	VSUBPD  Z7, Z6, Z6           // c·x − s·y
	VADDPD  Z9, Z8, Z8
	VSUBPD  Z11, Z10, Z10
	VMOVUPD Z4, (R11)(BX*8)
	VMOVUPD Z8, 64(R11)(BX*8)
	VMOVUPD Z6, (R10)(BX*8)
	VMOVUPD Z10, 64(R10)(BX*8)
	ADDQ    $16, BX
	JMP     sixteen

one:
	CMPQ BX, DX
	JGE  next
	VMOVSD (R10)(BX*8), X0
	VMOVSD (R11)(BX*8), X2
	VMULSD X15, X0, X4
	VMULSD X14, X2, X5
	VMULSD X14, X0, X6
	VMULSD X15, X2, X7
	VADDSD X5, X4, X4
	VSUBSD X7, X6, X6
	VMOVSD X4, (R11)(BX*8)
	VMOVSD X6, (R10)(BX*8)
	INCQ   BX
	JMP    one

next:
	SUBQ SI, R10
	DECQ CX
	JMP  rotation

done:
	VZEROUPPER
	RET
