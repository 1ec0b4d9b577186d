package data

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/subtta/subtta/data/corrupt"
)

// Corrupted is a clean dataset corrupted on the fly: image i is image i
// of the clean dataset with one corruption at one severity applied, as
// CIFAR-10-C and ImageNet-C were made, but with new random draws that a
// seed fixes (see corrupt.NewSource).
//
// With the corrupt.CIFAR preset the clean images are used as they are and
// must be 32×32; the image is the uint8 array make_cifar_c.py stores. With
// corrupt.ImageNet the clean image goes through make_imagenet_c.py's
// pipeline: Resize(256) with Pillow's bilinear filter, CenterCrop(224),
// the corruption, and the JPEG of quality 85 ImageNet-C stores (encoded
// and decoded again), so that Item returns what reading the generated
// file would.
//
// Image i draws from corrupt.NewSource(seed, i, corruption, severity), so
// it does not depend on which images were read before; Item is safe for
// concurrent use if the clean dataset's is.
type Corrupted struct {
	clean      Dataset
	corruption string
	severity   int
	cfg        corrupt.Config
	seed       uint64
}

// NewCorrupted returns clean with the named corruption (one of
// corrupt.Names) at severity 1–5, using cfg's preset and, for frost, its
// FrostDir, whose overlays are loaded and checked here. The clean dataset
// stays the caller's to close.
func NewCorrupted(clean Dataset, corruption string, severity int, cfg corrupt.Config, seed uint64) (*Corrupted, error) {
	if err := checkCorruptions([]string{corruption}, cfg); err != nil {
		return nil, err
	}
	if severity < 1 || severity > Severities {
		return nil, fmt.Errorf("data: %s: severity %d out of range [1, %d]", corruption, severity, Severities)
	}
	return &Corrupted{clean: clean, corruption: corruption, severity: severity, cfg: cfg, seed: seed}, nil
}

// checkCorruptions checks that names are known corruptions, listed once,
// that cfg's preset is one of the two, and, if frost is among them, that
// its overlays load.
func checkCorruptions(names []string, cfg corrupt.Config) error {
	if cfg.Preset != corrupt.CIFAR && cfg.Preset != corrupt.ImageNet {
		return fmt.Errorf("data: unknown corruption preset %d", cfg.Preset)
	}
	for i, name := range names {
		if _, err := corrupt.Lookup(name); err != nil {
			return fmt.Errorf("data: %w", err)
		}
		if slices.Contains(names[:i], name) {
			return fmt.Errorf("data: corruption %s is listed twice", name)
		}
		if name == "frost" {
			// Load the overlays now (corrupt caches them), so that a
			// missing folder fails before any work is done.
			s := cfg.Preset.Size()
			if _, err := corrupt.Apply(corrupt.NewImage(s, s), name, 1, cfg, corrupt.NewPCG(0, 0)); err != nil {
				return fmt.Errorf("data: %w", err)
			}
		}
	}
	return nil
}

// Name returns "<corruption>/<severity>", e.g. "gaussian_noise/5".
func (d *Corrupted) Name() string { return fmt.Sprintf("%s/%d", d.corruption, d.severity) }

// Len returns the number of images of the clean dataset.
func (d *Corrupted) Len() int { return d.clean.Len() }

// Classes returns the clean dataset's class names.
func (d *Corrupted) Classes() []string { return d.clean.Classes() }

// Label returns the label of image i.
func (d *Corrupted) Label(i int) int { return d.clean.Label(i) }

// Close does nothing: the clean dataset, which several Corrupted datasets
// may share, is closed by its owner.
func (d *Corrupted) Close() error { return nil }

// Item reads clean image i and corrupts it.
func (d *Corrupted) Item(i int) (*RGB, int, error) {
	img, label, err := d.clean.Item(i)
	if err != nil {
		return nil, 0, err
	}
	in, err := corruptionInput(img, d.cfg.Preset)
	if err != nil {
		return nil, 0, fmt.Errorf("data: %s: image %d: %w", d.clean.Name(), i, err)
	}
	out, err := corruptImage(in, i, d.corruption, d.severity, d.cfg, d.seed)
	if err != nil {
		return nil, 0, fmt.Errorf("data: %s: image %d: %w", d.clean.Name(), i, err)
	}
	if d.cfg.Preset != corrupt.ImageNet {
		return out, label, nil
	}
	var buf bytes.Buffer
	if err := corrupt.EncodeImageNetC(&buf, toCorruptImage(out)); err != nil {
		return nil, 0, fmt.Errorf("data: %s: image %d: %w", d.clean.Name(), i, err)
	}
	m, err := DecodeRGB(fmt.Sprintf("%s image %d", d.Name(), i), buf.Bytes())
	if err != nil {
		return nil, 0, err
	}
	return m, label, nil
}

// corruptionInput is the image a preset's corruptions take: a clean CIFAR
// image as it is (it must be 32×32), or ImageNet-C's resized and cropped
// input.
func corruptionInput(img *RGB, p corrupt.Preset) (*RGB, error) {
	if p == corrupt.ImageNet {
		return imageNetCInput(img)
	}
	if err := img.check(); err != nil {
		return nil, err
	}
	if s := p.Size(); img.W != s || img.H != s {
		return nil, fmt.Errorf("image is %dx%d; the %v corruptions need %dx%d images", img.W, img.H, p, s, s)
	}
	return img, nil
}

// corruptImage applies one corruption at one severity to image index i of
// a dataset, drawing from the (seed, i, corruption, severity) stream. The
// result is the uint8 array before any JPEG saving.
func corruptImage(in *RGB, i int, corruption string, severity int, cfg corrupt.Config, seed uint64) (*RGB, error) {
	src, err := corrupt.NewSource(seed, i, corruption, severity)
	if err != nil {
		return nil, err
	}
	out, err := corrupt.Apply(toCorruptImage(in), corruption, severity, cfg, src)
	if err != nil {
		return nil, err
	}
	return &RGB{W: out.W, H: out.H, Pix: out.Pix}, nil
}

// toCorruptImage views m as a corrupt.Image (the same HWC layout) without
// copying.
func toCorruptImage(m *RGB) *corrupt.Image {
	return &corrupt.Image{H: m.H, W: m.W, Pix: m.Pix}
}
