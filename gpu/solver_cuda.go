//go:build cuda && cgo

package gpu

/*
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

// cuSOLVER's dense symmetric eigensolver, declared here as the rest of CUDA
// is (cuda.go): statuses are ints, the handle a pointer; jobz and uplo are
// the enums cusolverEigMode_t and cublasFillMode_t.
typedef int solver_status;

static struct {
	solver_status (*create)(void **handle);
	solver_status (*destroy)(void *handle);
	solver_status (*setStream)(void *handle, void *stream);
	solver_status (*bufferSize)(void *handle, int jobz, int uplo, int n, const double *a, int lda,
		const double *w, int *lwork);
	solver_status (*syevd)(void *handle, int jobz, int uplo, int n, double *a, int lda, double *w,
		double *work, int lwork, int *info);
} solver;

#define SOLVER_BIND(f, name) if ((*(void **)&solver.f = dlsym(lib, name)) == NULL) return name;

static const char *solver_bind(void *lib) {
	SOLVER_BIND(create, "cusolverDnCreate")
	SOLVER_BIND(destroy, "cusolverDnDestroy")
	SOLVER_BIND(setStream, "cusolverDnSetStream")
	SOLVER_BIND(bufferSize, "cusolverDnDsyevd_bufferSize")
	SOLVER_BIND(syevd, "cusolverDnDsyevd")
	return NULL;
}

static solver_status w_solverCreate(void **h) { return solver.create(h); }
static solver_status w_solverDestroy(void *h) { return solver.destroy(h); }
static solver_status w_solverSetStream(void *h, void *s) { return solver.setStream(h, s); }
static solver_status w_syevdBufferSize(void *h, int n, uintptr_t a, uintptr_t w, int *lwork) {
	return solver.bufferSize(h, 1, 0, n, (const double *)a, n, (const double *)w, lwork);
}
static solver_status w_syevd(void *h, int n, uintptr_t a, uintptr_t w, uintptr_t work, int lwork, uintptr_t info) {
	return solver.syevd(h, 1, 0, n, (double *)a, n, (double *)w, (double *)work, lwork, (int *)info);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/subtta/subtta/autograd/kernel"
)

// solverNames are cuSOLVER's sonames: 12 in CUDA 13, 11 in CUDA 11 and 12.
var solverNames = []string{"libcusolver.so.12", "libcusolver.so.11"}

var (
	solverOnce sync.Once
	solverErr  error
)

// loadSolver opens cuSOLVER, once, apart from the four libraries Open
// needs: without it the device works and SymEig says so.
func loadSolver() error {
	solverOnce.Do(func() {
		h := dlopenFirst(solverNames)
		if h == nil {
			solverErr = fmt.Errorf("%s not found: %w", soNames(solverNames), kernel.ErrUnsupported)
			return
		}
		if missing := C.solver_bind(h); missing != nil {
			solverErr = fmt.Errorf("cuSOLVER lacks %s: %w", C.GoString(missing), kernel.ErrUnsupported)
		}
	})
	return solverErr
}

// SymEig decomposes the symmetric n×n matrix a (row-major float64) with
// cuSOLVER's divide and conquer (cusolverDnDsyevd) in float64: eigenvalues
// ascending, eigenvectors as the rows of vectors (the columns of cuSOLVER's
// column-major result). It implements kernel.SymmetricEigen; without
// cuSOLVER the error wraps kernel.ErrUnsupported. It uploads a, runs
// SymEigInto and downloads the result.
func (d *device) SymEig(a []float64, n int) (values, vectors []float64, err error) {
	if n < 1 || len(a) < n*n {
		return nil, nil, fmt.Errorf("gpu: SymEig: %d values for a %d×%d matrix", len(a), n, n)
	}
	if err := loadSolver(); err != nil {
		return nil, nil, fmt.Errorf("gpu: SymEig: %w", err)
	}
	// float64 buffers as float32 ones of twice the length.
	ab, err := d.Alloc(2 * n * n)
	if err != nil {
		return nil, nil, err
	}
	defer d.Free(ab)
	wb, err := d.Alloc(2 * n)
	if err != nil {
		return nil, nil, err
	}
	defer d.Free(wb)
	if err := d.Upload(ab, asFloat32(a[:n*n])); err != nil {
		return nil, nil, err
	}
	if err := d.SymEigInto(wb, ab, ab, n); err != nil {
		return nil, nil, err
	}
	values, vectors = make([]float64, n), make([]float64, n*n)
	if err := d.Download(asFloat32(values), wb); err != nil {
		return nil, nil, err
	}
	if err := d.Download(asFloat32(vectors), ab); err != nil {
		return nil, nil, err
	}
	return values, vectors, nil
}

// SymEigInto is SymEig on device buffers (kernel.Float64Device): a is
// copied into vectors (one kernel; a and vectors may be the same buffer),
// which cusolverDnDsyevd overwrites with the eigenvectors, and values gets
// the eigenvalues. It waits for the device once, to read cuSOLVER's info.
func (d *device) SymEigInto(values, vectors, a kernel.Buf, n int) error {
	if n < 1 || !fits32(2*n*n) {
		return fmt.Errorf("gpu: SymEigInto: a %d×%d matrix", n, n)
	}
	if err := loadSolver(); err != nil {
		return fmt.Errorf("gpu: SymEigInto: %w", err)
	}
	pv, err := d.ptrs("SymEigInto", 2*n*n, a, vectors)
	if err != nil {
		return err
	}
	pw, err := d.ptrs("SymEigInto", 2*n, values)
	if err != nil {
		return err
	}
	if err := d.copyValues(vectors, a, 2*n*n); err != nil {
		return err
	}
	var bufs []kernel.Buf
	defer func() {
		for _, b := range bufs {
			d.Free(b)
		}
	}()
	alloc := func(float64s int) (kernel.Buf, C.uintptr_t, error) {
		b, err := d.Alloc(2 * float64s)
		if err != nil {
			return nil, 0, err
		}
		bufs = append(bufs, b)
		return b, C.uintptr_t(b.(*buf).ptr), nil
	}
	ap, wp := pv[1], pw[0]
	ib, ip, err := alloc(1) // the int info, in a double's room
	if err != nil {
		return err
	}
	// cuSOLVER writes four bytes of the eight read back below: zero them
	// first, or compute-sanitizer's initcheck reports the download.
	info := make([]float64, 1)
	if err := d.Upload(ib, asFloat32(info)); err != nil {
		return err
	}
	var lwork C.int
	err = d.exec(func() error {
		if d.solver == nil {
			if s := C.w_solverCreate(&d.solver); s != 0 {
				return &Error{"cusolverDnCreate", int(s), ""}
			}
			// On the device's stream, after the uploads queued there.
			if s := C.w_solverSetStream(d.solver, d.stream); s != 0 {
				C.w_solverDestroy(d.solver)
				d.solver = nil
				return &Error{"cusolverDnSetStream", int(s), ""}
			}
		}
		if s := C.w_syevdBufferSize(d.solver, C.int(n), ap, wp, &lwork); s != 0 {
			return &Error{"cusolverDnDsyevd_bufferSize", int(s), ""}
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, workp, err := alloc(max(1, int(lwork)))
	if err != nil {
		return err
	}
	err = d.exec(func() error {
		if s := C.w_syevd(d.solver, C.int(n), ap, wp, workp, lwork, ip); s != 0 {
			return &Error{"cusolverDnDsyevd", int(s), ""}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := d.Download(asFloat32(info), ib); err != nil {
		return err
	}
	if i := *(*int32)(unsafe.Pointer(&info[0])); i != 0 {
		return fmt.Errorf("gpu: cusolverDnDsyevd: info %d (%d off-diagonal elements did not converge, or argument %d was wrong)", i, i, -i)
	}
	return nil
}

// asFloat32 views float64 values as twice as many float32 ones, for the
// float32 buffers of Upload and Download.
func asFloat32(v []float64) []float32 {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&v[0])), 2*len(v))
}

// closeSolver destroys the cuSOLVER handle, if any; called by Close under
// the device's lock.
func (d *device) closeSolver() error {
	if d.solver == nil {
		return nil
	}
	s := C.w_solverDestroy(d.solver)
	d.solver = nil
	if s != 0 {
		return &Error{"cusolverDnDestroy", int(s), ""}
	}
	return nil
}
