//go:build cuda && cgo

package gpu

/*
#include <dlfcn.h>
#include <stdint.h>

// cuBLAS's float64 product, bound here beside the rest of cuBLAS (cuda.go)
// from the same library, on first use.
static int (*dgemm_fn)(void *handle, int transa, int transb, int m, int n, int k, const double *alpha,
	const double *a, int lda, const double *b, int ldb, const double *beta, double *c, int ldc);

static int dgemm_bind(void *lib) {
	*(void **)&dgemm_fn = dlsym(lib, "cublasDgemm_v2");
	return dgemm_fn != NULL;
}

static int w_dgemm(void *h, int ta, int tb, int m, int n, int k, double alpha, uintptr_t a, int lda,
		uintptr_t b, int ldb, double beta, uintptr_t c, int ldc) {
	return dgemm_fn(h, ta, tb, m, n, k, &alpha, (const double *)a, lda, (const double *)b, ldb, &beta, (double *)c, ldc);
}
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/subtta/subtta/autograd/kernel"
)

var (
	dgemmOnce sync.Once
	dgemmErr  error
)

// loadDgemm binds cublasDgemm_v2 from the cuBLAS that Open loaded.
func loadDgemm() error {
	dgemmOnce.Do(func() {
		h := dlopenFirst(cublasNames)
		if h == nil || C.dgemm_bind(h) == 0 {
			dgemmErr = fmt.Errorf("cublasDgemm_v2 not found in %s: %w", soNames(cublasNames), kernel.ErrUnsupported)
		}
	})
	return dgemmErr
}

// Dgemm is Gemm in float64 (kernel.Float64Device), row-major as Gemm by
// the same operand swap, with cublasDgemm_v2: float64 products and sums,
// as the CPU's gonum ones, whatever Options.Precision says. Buffers hold
// two float32 places per float64 value; sizes and leading dimensions count
// float64 values.
func (d *device) Dgemm(transA, transB bool, m, n, k int, alpha float64, a kernel.Buf, lda int, b kernel.Buf, ldb int, beta float64, c kernel.Buf, ldc int) error {
	if !fits32(m, n, k, lda, ldb, ldc) {
		return fmt.Errorf("gpu: Dgemm: sizes out of range (%d×%d×%d)", m, n, k)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		return fmt.Errorf("gpu: Dgemm with k = 0")
	}
	if err := loadDgemm(); err != nil {
		return fmt.Errorf("gpu: Dgemm: %w", err)
	}
	// In float32 places: twice the columns and the leading dimension.
	pa, err := d.operand("Dgemm A", a, transA, m, 2*k, 2*lda, 1, 0)
	if transA {
		pa, err = d.operand("Dgemm A", a, false, k, 2*m, 2*lda, 1, 0)
	}
	if err != nil {
		return err
	}
	pb, err := d.operand("Dgemm B", b, false, k, 2*n, 2*ldb, 1, 0)
	if transB {
		pb, err = d.operand("Dgemm B", b, false, n, 2*k, 2*ldb, 1, 0)
	}
	if err != nil {
		return err
	}
	pc, err := d.operand("Dgemm C", c, false, m, 2*n, 2*ldc, 1, 0)
	if err != nil {
		return err
	}
	return d.exec(func() error {
		if s := C.w_dgemm(d.blas, C.int(cublasOp(transB)), C.int(cublasOp(transA)), C.int(n), C.int(m), C.int(k), C.double(alpha),
			pb, C.int(ldb), pa, C.int(lda), C.double(beta), pc, C.int(ldc)); s != 0 {
			return blasErr("cublasDgemm_v2", s)
		}
		return nil
	})
}
