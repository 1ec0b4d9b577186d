#include "textflag.h"

// func transposeStrip8AVX2(dst *float32, dstStride int, src *float32, ldb int, groups int)
//
// Transposes an 8-row strip of src (row stride ldb floats) into dst (row
// stride dstStride floats), 8 columns at a time, groups times:
// dst[kk*dstStride+j] = src[j*ldb+kk] for j < 8, kk < 8·groups.
// Each 8×8 block goes through registers: unpck{l,h}ps pairs rows, shufps
// gathers 4-row columns within each 128-bit lane, and vperm2f128 joins the
// lanes of rows 0–3 and 4–7.
TEXT ·transposeStrip8AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R11
	MOVQ src+16(FP), SI
	MOVQ ldb+24(FP), R8
	MOVQ groups+32(FP), CX
	TESTQ CX, CX
	JLE  done

	SHLQ $2, R8                // src row stride in bytes
	LEAQ (R8)(R8*2), R9        // 3 src rows
	LEAQ (SI)(R8*4), R10       // src row 4
	SHLQ $2, R11               // dst row stride in bytes
	LEAQ (R11)(R11*2), R12     // 3 dst rows
	LEAQ (DI)(R11*4), R13      // dst row 4
	MOVQ R11, R14
	SHLQ $3, R14               // 8 dst rows: the step per group

loop:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (SI)(R9*1), Y3
	VMOVUPS (R10), Y4
	VMOVUPS (R10)(R8*1), Y5
	VMOVUPS (R10)(R8*2), Y6
	VMOVUPS (R10)(R9*1), Y7

	// Y8 = r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5], and so on.
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15

	// Y0 = column 0 of rows 0–3 | column 4 of rows 0–3, and so on.
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7

	// Y8…Y15 = columns 0…7 of rows 0–7.
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15

	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(R11*1)
	VMOVUPS Y10, (DI)(R11*2)
	VMOVUPS Y11, (DI)(R12*1)
	VMOVUPS Y12, (R13)
	VMOVUPS Y13, (R13)(R11*1)
	VMOVUPS Y14, (R13)(R11*2)
	VMOVUPS Y15, (R13)(R12*1)

	ADDQ $32, SI
	ADDQ $32, R10
	ADDQ R14, DI
	ADDQ R14, R13
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET
