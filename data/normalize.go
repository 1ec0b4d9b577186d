package data

import "fmt"

// Normalize writes the normalised copy of src, a run of CHW float32 images
// of side Size with values in [0, 1], to dst (allocated when too short)
// and returns it: (x − mean[c])/std[c] in float32, torchvision's
// Normalize, so that a [0, 1] image made from bytes as float32(v)/255 gives
// exactly what Transform gives. dst may be src.
func (p *Preprocessor) Normalize(dst, src []float32) ([]float32, error) {
	dst, err := p.images("normalize", dst, src)
	if err != nil {
		return nil, err
	}
	plane := p.size * p.size
	for i := range src {
		c := i / plane % 3
		dst[i] = (src[i] - p.mean[c]) / p.std[c]
	}
	return dst, nil
}

// Unnormalize undoes Normalize: x·std[c] + mean[c] in float32, for
// methods that augment the model's normalised input in [0, 1] (RoTTA's
// strong augmentation; baselines-spec §7). For a view made from bytes it
// gives float32(v)/255 up to float32 rounding (see TestNormalizeRoundTrip).
// dst may be src.
func (p *Preprocessor) Unnormalize(dst, src []float32) ([]float32, error) {
	dst, err := p.images("unnormalize", dst, src)
	if err != nil {
		return nil, err
	}
	plane := p.size * p.size
	for i := range src {
		c := i / plane % 3
		dst[i] = float32(src[i]*p.std[c]) + p.mean[c]
	}
	return dst, nil
}

// images checks that src holds whole CHW images of side Size and returns
// dst resized to src's length (allocated when too short).
func (p *Preprocessor) images(op string, dst, src []float32) ([]float32, error) {
	if n := p.OutputLen(); len(src)%n != 0 {
		return nil, fmt.Errorf("data: %s: %d values are not whole %dx%d CHW images", op, len(src), p.size, p.size)
	}
	if cap(dst) < len(src) {
		dst = make([]float32, len(src))
	}
	return dst[:len(src)], nil
}
