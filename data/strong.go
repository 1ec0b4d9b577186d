package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// RoTTA's strong augmentation: get_tta_transforms of the harness
// (mariodoebler/test-time-adaptation augmentations/transforms_cotta.py,
// the CoTTA/KATANA transform), applied by RoTTA to its whole memory batch
// at once, so that one parameter draw serves every image
// (baselines-spec §7):
//
//  1. clamp to [0, 1];
//  2. ColorJitterPro: brightness [0.6, 1.4], contrast [0.7, 1.3],
//     saturation [0.5, 1.5], hue [−0.06, 0.06], gamma [0.7, 1.3], in a
//     random order (gamma after clamping to [1e-8, 1]);
//  3. Pad(size/2, "edge");
//  4. RandomAffine(±15°, translate 1/16, scale [0.9, 1.1], bilinear,
//     fill 0);
//  5. GaussianBlur(5, σ ∈ [0.001, 0.5]);
//  6. CenterCrop(size);
//  7. RandomHorizontalFlip(½);
//  8. additive N(0, 0.005²) noise, drawn per value;
//  9. clamp to [0, 1].

// Colour jitter steps, in the order of ColorJitterPro's indices.
const (
	JitterBrightness = iota
	JitterContrast
	JitterSaturation
	JitterHue
	JitterGamma
)

// StrongNoiseStd is the standard deviation of the additive noise.
const StrongNoiseStd = 0.005

// StrongParams is one draw of the strong augmentation's parameters.
type StrongParams struct {
	// Order is the colour jitter's order, a permutation of the Jitter*
	// steps (ColorJitterPro's torch.randperm(5)).
	Order [5]int
	// The jitter factors, float32 like torch's uniform_ draws.
	Brightness, Contrast, Saturation, Hue, Gamma float32
	StrongGeometry
	// Flip mirrors the batch horizontally.
	Flip bool
}

// uniform32 draws from U(lo, hi) rounded to float32.
func uniform32(rng *rand.Rand, lo, hi float64) float32 {
	return float32(lo + (hi-lo)*rng.Float64())
}

// DrawStrongParams draws the parameters for images of side size from the
// ranges above, in the order of the transforms: the jitter order and
// factors, the affine map (angle, translations, scale; the translation
// bound is 1/16 of the padded side, and a drawn translation is rounded
// half to even as Python's round), the blur's σ, the flip. The noise is
// drawn when the parameters are applied.
func DrawStrongParams(size int, rng *rand.Rand) StrongParams {
	var p StrongParams
	copy(p.Order[:], rng.Perm(5))
	p.Brightness = uniform32(rng, 0.6, 1.4)
	p.Contrast = uniform32(rng, 0.7, 1.3)
	p.Saturation = uniform32(rng, 0.5, 1.5)
	p.Hue = uniform32(rng, -0.06, 0.06)
	p.Gamma = uniform32(rng, 0.7, 1.3)
	p.Angle = float64(uniform32(rng, -15, 15))
	side := float64(size + 2*(size/2))
	maxD := side / 16
	p.TX = int(math.RoundToEven(float64(uniform32(rng, -maxD, maxD))))
	p.TY = int(math.RoundToEven(float64(uniform32(rng, -maxD, maxD))))
	p.Scale = float64(uniform32(rng, 0.9, 1.1))
	p.Sigma = float64(uniform32(rng, 0.001, 0.5))
	p.Flip = rng.Float64() < 0.5
	return p
}

// Apply writes the strong augmentation of batch, n CHW float32 images of
// side size with values in [0, 1] (not normalised), to dst (allocated
// when too short; it may be batch) and returns it. The noise comes from
// noise (nil: no noise, for tests of the deterministic part). It takes
// about 1.3 s for 64 images of 224×224 on one core
// (BenchmarkStrongAugment).
func (p StrongParams) Apply(dst, batch []float32, n, size int, noise *rand.Rand) ([]float32, error) {
	if size <= 0 {
		return nil, fmt.Errorf("data: strong augmentation: image side %d", size)
	}
	plane := size * size
	if err := checkBatch("strong augmentation", batch, n, plane); err != nil {
		return nil, err
	}
	if err := p.StrongGeometry.check(size); err != nil {
		return nil, err
	}
	seen := [5]bool{}
	for _, s := range p.Order {
		if s < 0 || s >= 5 || seen[s] {
			return nil, fmt.Errorf("data: strong augmentation: jitter order %v is not a permutation of 0…4", p.Order)
		}
		seen[s] = true
	}
	if cap(dst) < len(batch) {
		dst = make([]float32, len(batch))
	}
	dst = dst[:len(batch)]
	work := make([]float32, len(batch))
	for i, v := range batch {
		work[i] = clamp01(v)
	}
	for _, s := range p.Order {
		var err error
		switch s {
		case JitterBrightness:
			err = AdjustBrightness(work, n, plane, p.Brightness)
		case JitterContrast:
			err = AdjustContrast(work, n, plane, p.Contrast)
		case JitterSaturation:
			err = AdjustSaturation(work, n, plane, p.Saturation)
		case JitterHue:
			err = AdjustHue(work, n, plane, p.Hue)
		case JitterGamma:
			for i, v := range work {
				work[i] = min(1, max(1e-8, v)) // ColorJitterPro's guard against NaN gradients
			}
			err = AdjustGamma(work, n, plane, p.Gamma)
		}
		if err != nil {
			return nil, err
		}
	}
	buf := make([]float32, (size+4)*(size+4))
	for k := range n {
		img := dst[3*k*plane : 3*(k+1)*plane]
		p.StrongGeometry.apply(img, work[3*k*plane:3*(k+1)*plane], size, buf)
		if p.Flip {
			for row := 0; row < len(img); row += size {
				r := img[row : row+size]
				for a, b := 0, size-1; a < b; a, b = a+1, b-1 {
					r[a], r[b] = r[b], r[a]
				}
			}
		}
	}
	for i, v := range dst {
		if noise != nil {
			v += float32(float32(noise.NormFloat64()) * StrongNoiseStd)
		}
		dst[i] = clamp01(v)
	}
	return dst, nil
}

// StrongAugment applies one draw of RoTTA's strong augmentation to the
// whole batch (n CHW float32 images of side size in [0, 1], not
// normalised) and writes the result to dst (allocated when too short; it
// may be batch): DrawStrongParams, then Apply with noise from the same
// rng. numpy's and torch's draws cannot be reproduced; the
// distribution and the per-op formulas are torchvision's.
func StrongAugment(dst, batch []float32, n, size int, rng *rand.Rand) ([]float32, error) {
	return DrawStrongParams(size, rng).Apply(dst, batch, n, size, rng)
}
