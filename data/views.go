package data

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// Crop is one random view's crop of a source image, in source pixels, and
// whether the view is flipped: what torchvision's RandomResizedCrop and
// RandomHorizontalFlip draw.
type Crop struct {
	Top, Left, Height, Width int
	Flip                     bool
}

// RandomResizedCropParams draws a crop of a w×h image as torchvision's
// RandomResizedCrop.get_params does with its defaults (scale (0.08, 1),
// ratio (3/4, 4/3)): up to ten tries of an area fraction uniform in the
// scale range and an aspect ratio log-uniform in the ratio range, sides
// rounded half to even (Python's round), kept when they fit, placed
// uniformly; else the centre crop of the clamped ratio. Then a horizontal
// flip with probability ½ (RandomHorizontalFlip). The random numbers come
// from rng, not torch's generator: the same crops as torch are not the
// aim, the same distribution is.
func RandomResizedCropParams(w, h int, rng *rand.Rand) Crop {
	const minScale, maxScale = 0.08, 1.0
	logLo, logHi := math.Log(3.0/4), math.Log(4.0/3)
	area := float64(w * h)
	c, found := Crop{}, false
	for range 10 {
		target := area * (minScale + (maxScale-minScale)*rng.Float64())
		ratio := math.Exp(logLo + (logHi-logLo)*rng.Float64())
		cw := int(math.RoundToEven(math.Sqrt(target * ratio)))
		ch := int(math.RoundToEven(math.Sqrt(target / ratio)))
		if cw > 0 && cw <= w && ch > 0 && ch <= h {
			c = Crop{Top: rng.IntN(h - ch + 1), Left: rng.IntN(w - cw + 1), Height: ch, Width: cw}
			found = true
			break
		}
	}
	if !found {
		in := float64(w) / float64(h)
		cw, ch := w, h
		switch {
		case in < 3.0/4:
			ch = int(math.RoundToEven(float64(cw) / (3.0 / 4)))
		case in > 4.0/3:
			cw = int(math.RoundToEven(float64(ch) * (4.0 / 3)))
		}
		c = Crop{Top: (h - ch) / 2, Left: (w - cw) / 2, Height: ch, Width: cw}
	}
	c.Flip = rng.Float64() < 0.5
	return c
}

// ResizedCrop cuts c out of img, resizes it to size×size with Pillow's
// bilinear filter (torchvision's RandomResizedCrop on a PIL image: crop,
// then resize) and flips it horizontally when c.Flip. It is bit for bit
// what Pillow 9.4 gives.
func ResizedCrop(img *RGB, c Crop, size int) (*RGB, error) {
	if err := img.check(); err != nil {
		return nil, fmt.Errorf("data: resized crop: %w", err)
	}
	if c.Width <= 0 || c.Height <= 0 || c.Left < 0 || c.Top < 0 || c.Left+c.Width > img.W || c.Top+c.Height > img.H || size <= 0 {
		return nil, fmt.Errorf("data: resized crop: %dx%d at (%d, %d) of a %dx%d image, to %d", c.Width, c.Height, c.Left, c.Top, img.W, img.H, size)
	}
	src := plane{pix: img.Pix, off: 3 * (c.Top*img.W + c.Left), stride: 3 * img.W, nch: 3}
	out := NewRGB(size, size)
	resizeWindow(bilinearFilter, out.Pix, src, c.Width, c.Height, size, size, 0, 0, size, size)
	if c.Flip {
		for y := range size {
			row := out.Pix[3*size*y : 3*size*(y+1)]
			for a, b := 0, size-1; a < b; a, b = a+1, b-1 {
				pa, pb := row[3*a:3*a+3], row[3*b:3*b+3]
				pa[0], pa[1], pa[2], pb[0], pb[1], pb[2] = pb[0], pb[1], pb[2], pa[0], pa[1], pa[2]
			}
		}
	}
	return out, nil
}

// ViewRNG returns the random source of the views of one image: seeded by
// the run's seed, the domain's name and the image's index in the domain,
// so that an image gets the same views at any thread count, in any batch
// and after an interrupted run resumes.
func ViewRNG(seed uint64, domain string, index int) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(domain))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(index))
	h.Write(b[:])
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// Views overwrites dst[:v·OutputLen()] with v preprocessed views of img (CHW
// float32, view after view) and returns that slice, allocating when dst is
// too short: view 0 is Transform's base view, views 1…v−1 random resized
// crops with flips of the raw image (RandomResizedCropParams, ResizedCrop
// to Size, then ToTensor and Normalize), drawn from rng. For CIFAR the crop
// is taken from the 32×32 image and upsampled straight to Size, as the
// official harness does for CLIP.
func (p *Preprocessor) Views(dst []float32, img *RGB, v int, rng *rand.Rand) ([]float32, error) {
	if v < 1 {
		return nil, fmt.Errorf("data: views: %d views, want at least 1", v)
	}
	n := p.OutputLen()
	if cap(dst) < v*n {
		dst = make([]float32, v*n)
	}
	dst = dst[:v*n]
	if _, err := p.Transform(dst[:n], img); err != nil {
		return nil, err
	}
	for k := 1; k < v; k++ {
		view, err := ResizedCrop(img, RandomResizedCropParams(img.W, img.H, rng), p.size)
		if err != nil {
			return nil, fmt.Errorf("data: views: %w", err)
		}
		p.normalize(dst[k*n:(k+1)*n], view.Pix, 3)
	}
	return dst, nil
}
