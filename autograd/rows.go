package autograd

import (
	"fmt"
	"math"
	"slices"

	smat "github.com/nlpodyssey/spago/mat"
	"github.com/subtta/subtta/autograd/kernel"
)

// GatherRows returns the rows of x [rows, n] at the given indices, in order,
// as a [len(index), n] matrix; an index may repeat. It pools the class token
// of every image (index b·tokens) or the end-of-text token of every prompt,
// and looks up token embeddings. It panics on an index out of range.
func GatherRows(x smat.Tensor, index []int) smat.Tensor {
	rows, _ := dims(x)
	for _, i := range index {
		if i < 0 || i >= rows {
			panic(fmt.Sprintf("autograd: GatherRows: index %d out of range [0, %d)", i, rows))
		}
	}
	if is32("GatherRows", x) {
		return run(&gatherOp[float32]{x: x, index: slices.Clone(index)})
	}
	return run(&gatherOp[float64]{x: x, index: slices.Clone(index)})
}

type gatherOp[T dtype] struct {
	x     smat.Tensor
	index []int
}

func (op *gatherOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x} }

func (op *gatherOp[T]) Forward() (smat.Tensor, error) {
	x := values[T](op.x)
	_, n := dims(op.x)
	y := make([]T, len(op.index)*n)
	for r, i := range op.index {
		copy(y[r*n:(r+1)*n], x[i*n:(i+1)*n])
	}
	return newMatrix(y, len(op.index), n), nil
}

func (op *gatherOp[T]) Backward(gy smat.Tensor) error {
	if !op.x.RequiresGrad() {
		return nil
	}
	dy := values[T](gy)
	rows, n := dims(op.x)
	buf := getZeroBuf[T](rows * n)
	dx := *buf
	for r, i := range op.index {
		kernel.Axpy(dx[i*n:(i+1)*n], 1, dy[r*n:(r+1)*n])
	}
	accGrad(op.x, dx)
	putBuf(buf)
	return nil
}

// normEps is the smallest norm L2Normalize divides by, as in PyTorch's
// F.normalize; it only matters for an all-zero row.
const normEps = 1e-12

// L2Normalize divides every row of x by its Euclidean norm.
func L2Normalize(x smat.Tensor) smat.Tensor {
	if is32("L2Normalize", x) {
		return run(&normalizeOp[float32]{x: x})
	}
	return run(&normalizeOp[float64]{x: x})
}

type normalizeOp[T dtype] struct {
	x     smat.Tensor
	y     []T
	norms []float64
}

func (op *normalizeOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x} }

func (op *normalizeOp[T]) Forward() (smat.Tensor, error) {
	x := values[T](op.x)
	rows, n := dims(op.x)
	op.y = make([]T, len(x))
	op.norms = make([]float64, rows)
	for r := range rows {
		var s float64
		for _, v := range x[r*n : (r+1)*n] {
			s += float64(v) * float64(v)
		}
		op.norms[r] = max(math.Sqrt(s), normEps)
		kernel.Scale(op.y[r*n:(r+1)*n], T(1/op.norms[r]), x[r*n:(r+1)*n])
	}
	return newMatrix(op.y, rows, n), nil
}

// Backward: dx = (dy − y·(y·dy)) / ‖x‖ (for norms above normEps).
func (op *normalizeOp[T]) Backward(gy smat.Tensor) error {
	if !op.x.RequiresGrad() {
		return nil
	}
	dy := values[T](gy)
	rows, n := dims(op.x)
	buf := getBuf[T](rows * n)
	dx := *buf
	for r := range rows {
		yr, dyr, dxr := op.y[r*n:(r+1)*n], dy[r*n:(r+1)*n], dx[r*n:(r+1)*n]
		var dot float64
		for j, v := range yr {
			dot += float64(v) * float64(dyr[j])
		}
		inv := 1 / op.norms[r]
		for j, v := range yr {
			dxr[j] = T(inv * (float64(dyr[j]) - float64(v)*dot))
		}
	}
	accGrad(op.x, dx)
	putBuf(buf)
	return nil
}

// TokenEmbedding builds the token sequence of a vision transformer: for each
// of batch images, the class token followed by the image's patch embeddings,
// plus the positional embedding. patches is [batch·grid, width] (image-major,
// as PatchEmbed returns it), class has width values, pos is [grid+1, width];
// the result is [batch·(grid+1), width]. It panics on mismatched shapes.
func TokenEmbedding(patches, class, pos smat.Tensor, batch int) smat.Tensor {
	rows, w := dims(patches)
	pr, pc := dims(pos)
	if batch <= 0 || rows%batch != 0 || class.Size() != w || pc != w || pr != rows/batch+1 {
		panic(fmt.Sprintf("autograd: TokenEmbedding: patches [%d, %d] in %d images, class of %d values and pos [%d, %d] do not fit",
			rows, w, batch, class.Size(), pr, pc))
	}
	if sameType("TokenEmbedding", patches, class, pos) {
		return run(&tokenEmbedOp[float32]{patches: patches, class: class, pos: pos, batch: batch})
	}
	return run(&tokenEmbedOp[float64]{patches: patches, class: class, pos: pos, batch: batch})
}

type tokenEmbedOp[T dtype] struct {
	patches, class, pos smat.Tensor
	batch               int
}

func (op *tokenEmbedOp[T]) Operands() []smat.Tensor {
	return []smat.Tensor{op.patches, op.class, op.pos}
}

func (op *tokenEmbedOp[T]) Forward() (smat.Tensor, error) {
	p, cls, pos := values[T](op.patches), values[T](op.class), values[T](op.pos)
	rows, w := dims(op.patches)
	grid := rows / op.batch
	t := grid + 1
	y := make([]T, op.batch*t*w)
	for b := range op.batch {
		yb := y[b*t*w : (b+1)*t*w]
		kernel.Add(yb[:w], cls, pos[:w])
		kernel.Add(yb[w:], p[b*grid*w:(b+1)*grid*w], pos[w:])
	}
	return newMatrix(y, op.batch*t, w), nil
}

func (op *tokenEmbedOp[T]) Backward(gy smat.Tensor) error {
	dy := values[T](gy)
	rows, w := dims(op.patches)
	grid := rows / op.batch
	t := grid + 1
	if op.patches.RequiresGrad() {
		buf := getBuf[T](rows * w)
		for b := range op.batch {
			copy((*buf)[b*grid*w:(b+1)*grid*w], dy[(b*t+1)*w:(b+1)*t*w])
		}
		accGrad(op.patches, *buf)
		putBuf(buf)
	}
	if op.class.RequiresGrad() {
		buf := getZeroBuf[T](w)
		for b := range op.batch {
			kernel.Axpy(*buf, 1, dy[b*t*w:(b*t+1)*w])
		}
		accGrad(op.class, *buf)
		putBuf(buf)
	}
	if op.pos.RequiresGrad() {
		buf := getZeroBuf[T](t * w)
		for b := range op.batch {
			kernel.Axpy(*buf, 1, dy[b*t*w:(b+1)*t*w])
		}
		accGrad(op.pos, *buf)
		putBuf(buf)
	}
	return nil
}

// PatchGeometry describes a batch of images for PatchEmbed: each image is
// stored NCHW and flattened into one row of Channels·Height·Width values,
// cut into Patch×Patch squares (a convolution with kernel = stride = Patch;
// trailing pixels that do not fill a patch are dropped, as in PyTorch).
type PatchGeometry struct {
	Channels, Height, Width, Patch int
}

// Grid returns the number of patches down and across an image.
func (g PatchGeometry) Grid() (rows, cols int) { return g.Height / g.Patch, g.Width / g.Patch }

// Patches returns the patches of images [batch, C·H·W] as rows
// [batch·gridRows·gridCols, C·Patch·Patch]: image-major, then the patch grid
// row-major; within a row, channel, then patch row, then patch column (the
// order of a flattened PyTorch conv weight [out, C, P, P]). It panics if the
// images do not match the geometry.
func Patches(images smat.Tensor, g PatchGeometry) smat.Tensor {
	_, cols := dims(images)
	if g.Channels <= 0 || g.Patch <= 0 || g.Height < g.Patch || g.Width < g.Patch || cols != g.Channels*g.Height*g.Width {
		panic(fmt.Sprintf("autograd: Patches: images with %d values per row do not match %+v", cols, g))
	}
	if is32("Patches", images) {
		return run(&patchesOp[float32]{images: images, g: g})
	}
	return run(&patchesOp[float64]{images: images, g: g})
}

// PatchEmbed is the vision transformer's patch embedding: PyTorch's
// conv1(images).flatten(2).permute(0, 2, 1), computed as Patches then a
// Linear layer whose weight is the conv weight [width, C·P·P] (no bias).
// The result is [batch·patches, width].
//
// Without gradients the patches go to pooled scratch rather than into a
// matrix of their own (as large as the images) that is garbage at once.
func PatchEmbed(images smat.Tensor, w *LinearParams, g PatchGeometry) smat.Tensor {
	ops := []smat.Tensor{images, w.Weight}
	if w.Bias != nil {
		ops = append(ops, w.Bias)
	}
	if anyRequiresGrad(ops) {
		return Linear(Patches(images, g), w)
	}
	if sameType("PatchEmbed", ops...) {
		return patchEmbedOffTape[float32](images, w, g)
	}
	return patchEmbedOffTape[float64](images, w, g)
}

// patchImages is the number of images PatchEmbed cuts into patches at a
// time without gradients: 8 ViT-B/32 images are 4.8 MB of patches.
const patchImages = 8

func patchEmbedOffTape[T dtype](images smat.Tensor, w *LinearParams, g PatchGeometry) smat.Tensor {
	batch, cols := dims(images)
	if g.Channels <= 0 || g.Patch <= 0 || g.Height < g.Patch || g.Width < g.Patch || cols != g.Channels*g.Height*g.Width {
		panic(fmt.Sprintf("autograd: PatchEmbed: images with %d values per row do not match %+v", cols, g))
	}
	gr, gc := g.Grid()
	perImage, rowLen, out := gr*gc, g.Channels*g.Patch*g.Patch, w.Out()
	if rowLen != w.In() {
		panic(fmt.Sprintf("autograd: PatchEmbed: patches have %d values, weight expects %d", rowLen, w.In()))
	}
	x := values[T](images)
	y := make([]T, batch*perImage*out)
	wt := values[T](w.Weight)
	// The weight is packed once for all chunks (float32).
	var packed *kernel.PackedB
	if wt32, ok := any(wt).([]float32); ok {
		var kept bool
		packed, kept = w.packed32(true, wt32)
		if !kept {
			defer packed.Release()
		}
	}
	buf := getBuf[T](min(batch, patchImages) * perImage * rowLen)
	defer putBuf(buf)
	for b0 := 0; b0 < batch; b0 += patchImages {
		n := min(patchImages, batch-b0)
		chunk := newMatrix(x[b0*cols:(b0+n)*cols], n, cols)
		patches := (*buf)[:n*perImage*rowLen]
		op := &patchesOp[T]{images: chunk, g: g}
		// The images of the chunk are cut in parallel: cutting copies every
		// pixel (38 MB for 64 ViT-B/32 images), which on one thread left the
		// others idle.
		parallelFor(n, func(lo, hi int) {
			op.eachIn(lo, hi, func(dst, src, k int) { copy(patches[dst:dst+k], x[b0*cols+src:b0*cols+src+k]) })
		})
		yc := y[b0*perImage*out : (b0+n)*perImage*out]
		low := false // the layer's reduced precision, which adds the bias
		switch {
		case packed != nil:
			low = linearLow(w, n*perImage, any(patches).([]float32), rowLen, any(yc).([]float32))
			if !low {
				kernel.GemmPacked(false, n*perImage, 1, any(patches).([]float32), rowLen, packed, 0, any(yc).([]float32), out)
			}
		default:
			gemm(false, true, n*perImage, out, rowLen, 1, patches, rowLen, wt, rowLen, 0, yc, out)
		}
		if w.Bias != nil && !low {
			kernel.AddRowVector(yc, n*perImage, out, values[T](w.Bias))
		}
	}
	return newMatrix(y, batch*perImage, out)
}

type patchesOp[T dtype] struct {
	images smat.Tensor
	g      PatchGeometry
}

func (op *patchesOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.images} }

// each calls fn(dst, src, n) for every contiguous run of n pixels: dst indexes
// the patch matrix, src the image matrix.
func (op *patchesOp[T]) each(fn func(dst, src, n int)) {
	batch, _ := dims(op.images)
	op.eachIn(0, batch, fn)
}

// eachIn is each for images lo to hi − 1 only (offsets still from image 0).
func (op *patchesOp[T]) eachIn(lo, hi int, fn func(dst, src, n int)) {
	g := op.g
	gr, gc := g.Grid()
	p := g.Patch
	imgSize := g.Channels * g.Height * g.Width
	rowLen := g.Channels * p * p
	for b := lo; b < hi; b++ {
		for py := range gr {
			for px := range gc {
				dst := ((b*gr+py)*gc + px) * rowLen
				for c := range g.Channels {
					for ky := range p {
						src := b*imgSize + (c*g.Height+py*p+ky)*g.Width + px*p
						fn(dst, src, p)
						dst += p
					}
				}
			}
		}
	}
}

func (op *patchesOp[T]) Forward() (smat.Tensor, error) {
	x := values[T](op.images)
	batch, _ := dims(op.images)
	gr, gc := op.g.Grid()
	rowLen := op.g.Channels * op.g.Patch * op.g.Patch
	y := make([]T, batch*gr*gc*rowLen)
	op.each(func(dst, src, n int) { copy(y[dst:dst+n], x[src:src+n]) })
	return newMatrix(y, batch*gr*gc, rowLen), nil
}

func (op *patchesOp[T]) Backward(gy smat.Tensor) error {
	if !op.images.RequiresGrad() {
		return nil
	}
	dy := values[T](gy)
	buf := getZeroBuf[T](op.images.Size()) // dropped border pixels get 0
	dx := *buf
	op.each(func(dst, src, n int) { copy(dx[src:src+n], dy[dst:dst+n]) })
	accGrad(op.images, dx)
	putBuf(buf)
	return nil
}

// ReplaceRows returns x with row rows[k] replaced by row srcRows[k] of src,
// for every k: TPT's learnable context vectors taking the place of the
// token embeddings of "a photo of a" in every class prompt. The gradient
// of a replaced row goes to src, that of the others to x. It panics on an
// index out of range, a repeated target row, or widths that differ.
func ReplaceRows(x smat.Tensor, rows []int, src smat.Tensor, srcRows []int) smat.Tensor {
	r, n := dims(x)
	sr, sn := dims(src)
	if sn != n || len(rows) != len(srcRows) {
		panic(fmt.Sprintf("autograd: ReplaceRows: x is %d wide, src %d; %d rows for %d sources", n, sn, len(rows), len(srcRows)))
	}
	seen := make(map[int]bool, len(rows))
	for k, i := range rows {
		if i < 0 || i >= r || seen[i] || srcRows[k] < 0 || srcRows[k] >= sr {
			panic(fmt.Sprintf("autograd: ReplaceRows: row %d ← source row %d of [0, %d) × [0, %d), or repeated", i, srcRows[k], r, sr))
		}
		seen[i] = true
	}
	if is32("ReplaceRows", x) != is32("ReplaceRows", src) {
		panic("autograd: ReplaceRows: x and src differ in precision")
	}
	if is32("ReplaceRows", x) {
		return run(&replaceOp[float32]{x: x, src: src, rows: slices.Clone(rows), srcRows: slices.Clone(srcRows)})
	}
	return run(&replaceOp[float64]{x: x, src: src, rows: slices.Clone(rows), srcRows: slices.Clone(srcRows)})
}

type replaceOp[T dtype] struct {
	x, src        smat.Tensor
	rows, srcRows []int
}

func (op *replaceOp[T]) Operands() []smat.Tensor { return []smat.Tensor{op.x, op.src} }

func (op *replaceOp[T]) Forward() (smat.Tensor, error) {
	r, n := dims(op.x)
	y := slices.Clone(values[T](op.x))
	src := values[T](op.src)
	for k, i := range op.rows {
		j := op.srcRows[k]
		copy(y[i*n:(i+1)*n], src[j*n:(j+1)*n])
	}
	return newMatrix(y, r, n), nil
}

func (op *replaceOp[T]) Backward(gy smat.Tensor) error {
	dy := values[T](gy)
	r, n := dims(op.x)
	if op.x.RequiresGrad() {
		buf := getZeroBuf[T](r * n)
		dx := *buf
		copy(dx, dy)
		for _, i := range op.rows {
			clear(dx[i*n : (i+1)*n])
		}
		accGrad(op.x, dx)
		putBuf(buf)
	}
	if op.src.RequiresGrad() {
		sr, _ := dims(op.src)
		buf := getZeroBuf[T](sr * n)
		ds := *buf
		for k, i := range op.rows {
			j := op.srcRows[k]
			kernel.Axpy(ds[j*n:(j+1)*n], 1, dy[i*n:(i+1)*n])
		}
		accGrad(op.src, ds)
		putBuf(buf)
	}
	return nil
}
