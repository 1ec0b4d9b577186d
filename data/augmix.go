package data

import (
	"fmt"
	"math/rand/v2"
)

// AugMixOp is one of AugMix's nine operations, in the order of the
// harness' augmix_ops.augmentations list (mariodoebler/test-time-adaptation
// augmentations/augmix_ops.py; zhangmarvin/memo has the same nine).
type AugMixOp int

const (
	OpAutoContrast AugMixOp = iota
	OpEqualize
	OpPosterize
	OpRotate
	OpSolarize
	OpShearX
	OpShearY
	OpTranslateX
	OpTranslateY
	numAugMixOps
)

var augMixOpNames = [numAugMixOps]string{"autocontrast", "equalize", "posterize", "rotate", "solarize", "shear_x", "shear_y", "translate_x", "translate_y"}

func (op AugMixOp) String() string {
	if op < 0 || op >= numAugMixOps {
		return fmt.Sprintf("AugMixOp(%d)", int(op))
	}
	return augMixOpNames[op]
}

// AugMix's fixed settings (harness transforms_augmix.py augmix, severity
// 1): three chains, each of one to three operations.
const (
	augMixWidth    = 3
	augMixMaxDepth = 3
)

// ApplyAugMixOp applies op to img at severity 1 as augmix_ops.py does,
// drawing its parameters from rng: a level L uniform in [0.1, 1) for every
// op but autocontrast and equalize, then, for the geometric ops, a sign
// (negative with probability ½). With Python's int() truncation:
//   - posterize keeps 4 − int(L·4/10) = 4 bits;
//   - rotate turns by ±int(L·30/10) degrees;
//   - solarize inverts from 256 − int(L·256/10);
//   - shear_x and shear_y shear by ±L·0.3/10;
//   - translate_x and translate_y shift by ±int(L·(size/3)/10) pixels,
//     size being img.W (the harness' crop size; AugMix runs on square
//     crops).
//
// fill colours what the geometric ops uncover (MEMOFill or HarnessFill).
func ApplyAugMixOp(img *RGB, op AugMixOp, fill [3]uint8, rng *rand.Rand) (*RGB, error) {
	if op == OpAutoContrast {
		return AutoContrast(img)
	}
	if op == OpEqualize {
		return Equalize(img)
	}
	if op < 0 || op >= numAugMixOps {
		return nil, fmt.Errorf("data: AugMix: unknown operation %d", int(op))
	}
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: AugMix %v: %w", op, err)
	}
	level := 0.1 + 0.9*rng.Float64() // numpy's uniform(0.1, 1)
	intParam := func(maxval float64) int { return int(float64(level*maxval) / 10) }
	sign := func() float64 {
		if rng.Float64() > 0.5 {
			return -1
		}
		return 1
	}
	switch op {
	case OpPosterize:
		return Posterize(img, 4-intParam(4))
	case OpSolarize:
		return Solarize(img, 256-intParam(256))
	case OpRotate:
		deg := float64(intParam(30))
		return Rotate(img, sign()*deg, fill)
	case OpShearX, OpShearY:
		s := float64(level*0.3) / 10
		s *= sign()
		if op == OpShearX {
			return ShearX(img, s, fill)
		}
		return ShearY(img, s, fill)
	default: // OpTranslateX, OpTranslateY
		d := intParam(float64(img.W) / 3)
		d *= int(sign())
		if op == OpTranslateX {
			return TranslateX(img, d, fill)
		}
		return TranslateY(img, d, fill)
	}
}

// AugMix mixes three random chains of AugMix operations on x0 with x0
// itself, as the harness' augmix() does after its pre-augmentation, and
// writes the result in [0, 1] to dst[:3·W·H] as CHW float32 (allocated
// when too short), not normalised. From rng it draws, in this order,
// w ~ Dirichlet(1, 1, 1) and m ~ Beta(1, 1) (rounded to float32 as the
// harness' np.float32 does), then for each chain its depth, uniform in
// {1, 2, 3}, and for each step an operation uniform among the nine with
// its parameters (ApplyAugMixOp). With t(·) = ToTensor (float32(v)/255),
// the output is m·t(x0) + (1−m)·Σᵢ wᵢ·t(chainᵢ), evaluated in float32 in
// torch's order: the sum accumulates from zero, chain after chain, and
// nothing is fused.
func AugMix(dst []float32, x0 *RGB, fill [3]uint8, rng *rand.Rand) ([]float32, error) {
	if err := x0.check(); err != nil {
		return nil, fmt.Errorf("data: AugMix: %w", err)
	}
	plane := x0.W * x0.H
	if cap(dst) < 3*plane {
		dst = make([]float32, 3*plane)
	}
	dst = dst[:3*plane]
	var w [augMixWidth]float32
	var g [augMixWidth]float64
	sum := 0.0
	for i := range g {
		g[i] = rng.ExpFloat64() // Gamma(1) = Exp(1)
		sum += g[i]
	}
	for i := range w {
		w[i] = float32(g[i] / sum)
	}
	m := float32(rng.Float64()) // Beta(1, 1) = U(0, 1)

	mix := make([]float32, 3*plane)
	for i := range w {
		chain := x0
		depth := 1 + rng.IntN(augMixMaxDepth)
		for range depth {
			var err error
			if chain, err = ApplyAugMixOp(chain, AugMixOp(rng.IntN(int(numAugMixOps))), fill, rng); err != nil {
				return nil, err
			}
		}
		for j := range plane {
			for c := range 3 {
				t := float32(chain.Pix[3*j+c]) / 255
				mix[c*plane+j] += float32(w[i] * t)
			}
		}
	}
	om := 1 - m
	for j := range plane {
		for c := range 3 {
			t := float32(x0.Pix[3*j+c]) / 255
			dst[c*plane+j] = float32(m*t) + float32(om*mix[c*plane+j])
		}
	}
	return dst, nil
}

// AugMixViews writes v AugMix views of img to dst[:v·OutputLen()] (CHW
// float32, view after view, normalised like Transform; allocated when too
// short) and returns that slice: MEMO's test-time views (baselines-spec
// §0.4 and §4). Each view is a random resized crop with flip of the raw
// image to Size (RandomResizedCropParams, ResizedCrop), mixed by AugMix
// with MEMO's fill, then normalised. The base view is not among them.
// All randomness comes from rng (seed it with ViewRNG for reproducible
// runs); numpy's draws cannot be reproduced, so the views follow the
// official distribution, not its pixels.
func (p *Preprocessor) AugMixViews(dst []float32, img *RGB, v int, rng *rand.Rand) ([]float32, error) {
	if v < 1 {
		return nil, fmt.Errorf("data: AugMix views: %d views, want at least 1", v)
	}
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: AugMix views: %w", err)
	}
	n := p.OutputLen()
	if cap(dst) < v*n {
		dst = make([]float32, v*n)
	}
	dst = dst[:v*n]
	for k := range v {
		x0, err := ResizedCrop(img, RandomResizedCropParams(img.W, img.H, rng), p.size)
		if err != nil {
			return nil, fmt.Errorf("data: AugMix views: %w", err)
		}
		view := dst[k*n : (k+1)*n]
		if _, err := AugMix(view, x0, MEMOFill, rng); err != nil {
			return nil, err
		}
		if _, err := p.Normalize(view, view); err != nil {
			return nil, err
		}
	}
	return dst, nil
}
