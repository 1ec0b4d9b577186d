package feature

import (
	"fmt"
	"math"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/autograd/kernel"
)

// projOnDevice is the projector of the last Project on a device, P' = P +
// soft·I (d×d float64), kept there: SubTTA projects every batch with the
// same one. It is uploaded again when the device, the projector's values
// or soft change (the values are compared with a host copy, d² of them, at
// each use: far less than the product).
var projOnDevice struct {
	mu     sync.Mutex
	d      kernel.Float64Device
	soft   float64
	shadow []float64 // P's values when uploaded
	buf    kernel.Buf
}

// deviceProjector returns P' = P + soft·I on d (uploading it if needed),
// with the lock held: the caller runs its products and unlocks.
func deviceProjector(d kernel.Float64Device, p mat.Matrix, soft float64) (kernel.Buf, error) {
	pr := &projOnDevice
	n, _ := p.Dims()
	if pr.d == d && pr.buf != nil && math.Float64bits(pr.soft) == math.Float64bits(soft) && sameMatrix(pr.shadow, p) {
		return pr.buf, nil
	}
	full := make([]float64, n*n)
	for i := range n {
		for j := range n {
			full[i*n+j] = p.At(i, j)
		}
	}
	if pr.buf != nil {
		pr.d.Free(pr.buf)
		pr.buf, pr.shadow = nil, nil
	}
	b, err := d.Alloc(2 * n * n)
	if err != nil {
		return nil, err
	}
	shadow := append([]float64(nil), full...)
	for i := range n {
		full[i*n+i] += soft
	}
	if err := kernel.UploadFloat64(d, b, full); err != nil {
		d.Free(b)
		return nil, err
	}
	pr.d, pr.soft, pr.shadow, pr.buf = d, soft, shadow, b
	return b, nil
}

// sameMatrix reports whether p holds the bits of full (n×n, row-major):
// for a SymDense (the text projector) by its stored triangle, without a
// method call per value.
func sameMatrix(full []float64, p mat.Matrix) bool {
	n, c := p.Dims()
	if n != c || len(full) != n*n {
		return false
	}
	if s, ok := p.(*mat.SymDense); ok {
		raw := s.RawSymmetric()
		for i := range n {
			row, want := raw.Data[i*raw.Stride+i:i*raw.Stride+n], full[i*n+i:(i+1)*n]
			for j, x := range row {
				if math.Float64bits(x) != math.Float64bits(want[j]) {
					return false
				}
			}
		}
		return true
	}
	for i := range n {
		for j := range n {
			if math.Float64bits(p.At(i, j)) != math.Float64bits(full[i*n+j]) {
				return false
			}
		}
	}
	return true
}

// productOnDevice computes x·P'ᵀ (trans) or x·P' for x (B×d) on d, P' =
// p + soft·I kept there: x goes up and the product comes back. As the CPU's
// x·pᵀ + soft·x (or dy·p + soft·dy) within rounding: soft is added to P's
// diagonal before the product rather than to its result.
func productOnDevice(d kernel.Float64Device, x mat.Matrix, p mat.Matrix, soft float64, trans bool) (*mat.Dense, error) {
	b, n := x.Dims()
	xs := mat.DenseCopyOf(x).RawMatrix().Data
	projOnDevice.mu.Lock()
	defer projOnDevice.mu.Unlock()
	pb, err := deviceProjector(d, p, soft)
	if err != nil {
		return nil, fmt.Errorf("feature: project on %s: %w", d.Name(), err)
	}
	xb, err := d.Alloc(2 * b * n)
	if err != nil {
		return nil, fmt.Errorf("feature: project on %s: %w", d.Name(), err)
	}
	defer d.Free(xb)
	yb, err := d.Alloc(2 * b * n)
	if err != nil {
		return nil, fmt.Errorf("feature: project on %s: %w", d.Name(), err)
	}
	defer d.Free(yb)
	y := mat.NewDense(b, n, nil)
	if err = kernel.UploadFloat64(d, xb, xs); err == nil {
		err = d.Dgemm(false, trans, b, n, n, 1, xb, n, pb, n, 0, yb, n)
	}
	if err == nil {
		err = kernel.DownloadFloat64(d, y.RawMatrix().Data, yb)
	}
	if err != nil {
		return nil, fmt.Errorf("feature: project on %s: %w", d.Name(), err)
	}
	return y, nil
}
