package corrupt

import (
	"fmt"
	"strings"
)

// Preset selects the parameter tables: CIFAR-10-C (32×32 images,
// make_cifar_c.py) or ImageNet-C (224×224 images, make_imagenet_c.py).
type Preset int

const (
	CIFAR Preset = iota
	ImageNet
	numPresets
)

// Size returns the image side the preset's parameters are made for.
func (p Preset) Size() int {
	if p == ImageNet {
		return 224
	}
	return 32
}

func (p Preset) String() string {
	switch p {
	case CIFAR:
		return "CIFAR"
	case ImageNet:
		return "ImageNet"
	}
	return fmt.Sprintf("Preset(%d)", int(p))
}

// Group is the family a corruption belongs to in the benchmark's tables.
type Group int

const (
	Noise Group = iota
	Blur
	Weather
	Digital
)

func (g Group) String() string {
	switch g {
	case Noise:
		return "noise"
	case Blur:
		return "blur"
	case Weather:
		return "weather"
	case Digital:
		return "digital"
	}
	return fmt.Sprintf("Group(%d)", int(g))
}

// Info describes one corruption.
type Info struct {
	Name  string
	Group Group
	// Random reports whether the corruption draws from its Source.
	Random bool
	// AnySize reports whether images of any size are accepted; otherwise
	// the image must be Preset.Size() square.
	AnySize bool
}

// Config holds what a corruption needs besides the image and its Source.
type Config struct {
	Preset Preset
	// FrostDir is the folder with frost1.png, frost2.png, frost3.png,
	// frost4.jpg and frost5.jpg (hendrycks/robustness). Only frost reads it.
	FrostDir string
}

// env is what a corruption function gets.
type env struct {
	Config
	size int
	src  Source
}

// corruption is one registry entry; entry[P] implements it for the
// parameter type P of one corruption.
type corruption interface {
	info() Info
	run(img *Image, severity int, e *env) (*Image, error)
	params(p Preset, severity int) any
}

type entry[P any] struct {
	inf Info
	// tab[preset][severity-1], exactly as in make_cifar_c.py and make_imagenet_c.py.
	tab [numPresets][5]P
	fn  func(img *Image, p P, e *env) (*Image, error)
}

func (c *entry[P]) info() Info { return c.inf }

func (c *entry[P]) params(p Preset, s int) any { return c.tab[p][s-1] }

func (c *entry[P]) run(img *Image, s int, e *env) (*Image, error) {
	return c.fn(img, c.tab[e.Preset][s-1], e)
}

// mul multiplies in float64 at run time, as Python does for IMSIZE*0.08;
// a Go constant expression would be evaluated exactly and could differ in
// the last bit.
func mul(a, b float64) float64 { return a * b }

// registry lists the 15 corruptions in the benchmark's order. Their index
// is the k of the seeding rule (NewSource) and of the fixtures.
var registry = []corruption{
	&entry[float64]{inf: Info{"gaussian_noise", Noise, true, true},
		tab: [numPresets][5]float64{{.04, .06, .08, .09, .10}, {.08, .12, .18, .26, .38}},
		fn:  gaussianNoise},
	&entry[float64]{inf: Info{"shot_noise", Noise, true, true},
		tab: [numPresets][5]float64{{500, 250, 100, 75, 50}, {60, 25, 12, 5, 3}},
		fn:  shotNoise},
	&entry[float64]{inf: Info{"impulse_noise", Noise, true, true},
		tab: [numPresets][5]float64{{.01, .02, .03, .05, .07}, {.03, .06, .09, .17, .27}},
		fn:  impulseNoise},
	&entry[DefocusParams]{inf: Info{"defocus_blur", Blur, false, true},
		tab: [numPresets][5]DefocusParams{
			{{0.3, 0.4}, {0.4, 0.5}, {0.5, 0.6}, {1, 0.2}, {1.5, 0.1}},
			{{3, 0.1}, {4, 0.5}, {6, 0.5}, {8, 0.5}, {10, 0.5}}},
		fn: defocusBlur},
	&entry[GlassParams]{inf: Info{"glass_blur", Blur, true, false},
		tab: [numPresets][5]GlassParams{
			{{0.05, 1, 1}, {0.25, 1, 1}, {0.4, 1, 1}, {0.25, 1, 2}, {0.4, 1, 2}},
			{{0.7, 1, 2}, {0.9, 2, 1}, {1, 2, 3}, {1.1, 3, 2}, {1.5, 4, 2}}},
		fn: glassBlur},
	&entry[MotionParams]{inf: Info{"motion_blur", Blur, true, true},
		tab: [numPresets][5]MotionParams{
			{{6, 1}, {6, 1.5}, {6, 2}, {8, 2}, {9, 2.5}},
			{{10, 3}, {15, 5}, {15, 8}, {15, 12}, {20, 15}}},
		fn: motionBlur},
	&entry[ZoomParams]{inf: Info{"zoom_blur", Blur, false, false},
		tab: [numPresets][5]ZoomParams{
			{{1, 1.06, 0.01}, {1, 1.11, 0.01}, {1, 1.16, 0.01}, {1, 1.21, 0.01}, {1, 1.26, 0.01}},
			{{1, 1.11, 0.01}, {1, 1.16, 0.01}, {1, 1.21, 0.02}, {1, 1.26, 0.02}, {1, 1.31, 0.03}}},
		fn: zoomBlur},
	&entry[SnowParams]{inf: Info{"snow", Weather, true, false},
		tab: [numPresets][5]SnowParams{
			{{0.1, 0.2, 1, 0.6, 8, 3, 0.95},
				{0.1, 0.2, 1, 0.5, 10, 4, 0.9},
				{0.15, 0.3, 1.75, 0.55, 10, 4, 0.9},
				{0.25, 0.3, 2.25, 0.6, 12, 6, 0.85},
				{0.3, 0.3, 1.25, 0.65, 14, 12, 0.8}},
			{{0.1, 0.3, 3, 0.5, 10, 4, 0.8},
				{0.2, 0.3, 2, 0.5, 12, 4, 0.7},
				{0.55, 0.3, 4, 0.9, 12, 8, 0.7},
				{0.55, 0.3, 4.5, 0.85, 12, 8, 0.65},
				{0.55, 0.3, 2.5, 0.85, 12, 12, 0.55}}},
		fn: snow},
	&entry[FrostParams]{inf: Info{"frost", Weather, true, false},
		tab: [numPresets][5]FrostParams{
			{{1, 0.2}, {1, 0.3}, {0.9, 0.4}, {0.85, 0.4}, {0.75, 0.45}},
			{{1, 0.4}, {0.8, 0.6}, {0.7, 0.7}, {0.65, 0.7}, {0.6, 0.75}}},
		fn: frost},
	&entry[FogParams]{inf: Info{"fog", Weather, true, false},
		tab: [numPresets][5]FogParams{
			{{.2, 3}, {.5, 3}, {0.75, 2.5}, {1, 2}, {1.5, 1.75}},
			{{1.5, 2}, {2, 2}, {2.5, 1.7}, {2.5, 1.5}, {3, 1.4}}},
		fn: fog},
	&entry[float64]{inf: Info{"brightness", Weather, false, true},
		tab: [numPresets][5]float64{{.05, .1, .15, .2, .3}, {.1, .2, .3, .4, .5}},
		fn:  brightness},
	&entry[float64]{inf: Info{"contrast", Digital, false, true},
		tab: [numPresets][5]float64{{.75, .5, .4, .3, 0.15}, {0.4, .3, .2, .1, .05}},
		fn:  contrast},
	&entry[ElasticParams]{inf: Info{"elastic_transform", Digital, true, false},
		// CIFAR: IMSIZE*(…) with IMSIZE = 32; ImageNet: 244*(…), where the
		// upstream comment says 244 should have been 224.
		tab: [numPresets][5]ElasticParams{
			{{mul(32, 0), mul(32, 0), mul(32, 0.08)},
				{mul(32, 0.05), mul(32, 0.2), mul(32, 0.07)},
				{mul(32, 0.08), mul(32, 0.06), mul(32, 0.06)},
				{mul(32, 0.1), mul(32, 0.04), mul(32, 0.05)},
				{mul(32, 0.1), mul(32, 0.03), mul(32, 0.03)}},
			{{mul(244, 2), mul(244, 0.7), mul(244, 0.1)},
				{mul(244, 2), mul(244, 0.08), mul(244, 0.2)},
				{mul(244, 0.05), mul(244, 0.01), mul(244, 0.02)},
				{mul(244, 0.07), mul(244, 0.01), mul(244, 0.02)},
				{mul(244, 0.12), mul(244, 0.01), mul(244, 0.02)}}},
		fn: elasticTransform},
	&entry[float64]{inf: Info{"pixelate", Digital, false, false},
		tab: [numPresets][5]float64{{0.95, 0.9, 0.85, 0.75, 0.65}, {0.6, 0.5, 0.4, 0.3, 0.25}},
		fn:  pixelate},
	&entry[int]{inf: Info{"jpeg_compression", Digital, false, true},
		tab: [numPresets][5]int{{80, 65, 58, 50, 40}, {25, 18, 15, 10, 7}},
		fn:  jpegCompression},
}

// Names returns the 15 corruption names in the benchmark's order.
func Names() []string {
	out := make([]string, len(registry))
	for i, c := range registry {
		out[i] = c.info().Name
	}
	return out
}

// Corruptions returns the description of every corruption, in order.
func Corruptions() []Info {
	out := make([]Info, len(registry))
	for i, c := range registry {
		out[i] = c.info()
	}
	return out
}

func index(name string) (int, error) {
	for i, c := range registry {
		if c.info().Name == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("corrupt: unknown corruption %q; valid names: %s", name, strings.Join(Names(), ", "))
}

// Lookup returns the description of the named corruption.
func Lookup(name string) (Info, error) {
	i, err := index(name)
	if err != nil {
		return Info{}, err
	}
	return registry[i].info(), nil
}

// Params returns the parameters of a corruption at a severity for a preset:
// a float64 for the one-number corruptions (noise level, brightness shift,
// contrast factor, pixelate scale), an int JPEG quality, or one of the
// *Params structs.
func Params(name string, p Preset, severity int) (any, error) {
	i, err := index(name)
	if err != nil {
		return nil, err
	}
	if err := checkPresetSeverity(name, p, severity); err != nil {
		return nil, err
	}
	return registry[i].params(p, severity), nil
}

func checkPresetSeverity(name string, p Preset, severity int) error {
	if p < 0 || p >= numPresets {
		return fmt.Errorf("corrupt: %s: unknown preset %d (want CIFAR or ImageNet)", name, int(p))
	}
	if severity < 1 || severity > 5 {
		return fmt.Errorf("corrupt: %s: severity %d outside 1…5", name, severity)
	}
	return nil
}

// Apply corrupts img with the named corruption at severity 1…5, using the
// parameters of cfg.Preset and drawing random numbers from src (which may
// be nil for the deterministic corruptions). The result is the uint8 array
// the original code stores (np.uint8 of the float result: clipped, then
// truncated). img is not modified.
func Apply(img *Image, name string, severity int, cfg Config, src Source) (*Image, error) {
	i, err := index(name)
	if err != nil {
		return nil, err
	}
	c := registry[i]
	inf := c.info()
	if err := checkPresetSeverity(name, cfg.Preset, severity); err != nil {
		return nil, err
	}
	if err := img.valid(); err != nil {
		return nil, fmt.Errorf("corrupt: %s: %w", name, err)
	}
	s := cfg.Preset.Size()
	if !inf.AnySize && (img.H != s || img.W != s) {
		return nil, fmt.Errorf("corrupt: %s: image is %d×%d, the %v preset needs %d×%d", name, img.H, img.W, cfg.Preset, s, s)
	}
	if inf.Random && src == nil {
		return nil, fmt.Errorf("corrupt: %s: random corruption needs a Source (see NewSource)", name)
	}
	out, err := c.run(img, severity, &env{Config: cfg, size: s, src: src})
	if err != nil {
		return nil, fmt.Errorf("corrupt: %s severity %d: %w", name, severity, err)
	}
	return out, nil
}

// DefocusParams: disk radius and the σ of the Gaussian that antialiases it.
type DefocusParams struct{ Radius, AliasBlur float64 }

// GlassParams: Gaussian σ, largest pixel shift δ, shuffle passes.
type GlassParams struct {
	Sigma             float64
	Delta, Iterations int
}

// MotionParams: ImageMagick motion-blur radius and σ.
type MotionParams struct{ Radius, Sigma float64 }

// ZoomParams: zoom factors np.arange(Start, Stop, Step).
type ZoomParams struct{ Start, Stop, Step float64 }

// SnowParams: the seven numbers of the original table: normal loc and
// scale of the snow field, its zoom, the threshold below which it is
// zeroed, the motion-blur radius and σ, and the blend of the image with its
// brightened grey version.
type SnowParams struct{ Loc, Scale, Zoom, Threshold, Radius, Sigma, Blend float64 }

// FrostParams: weights of the image and of the frost overlay (0–255 scale).
type FrostParams struct{ Image, Frost float64 }

// FogParams: plasma strength and the wibble decay of the diamond-square map.
type FogParams struct{ Amount, Decay float64 }

// ElasticParams: displacement scale α, its Gaussian σ, and the affine
// jitter of the three anchor points, all in pixels.
type ElasticParams struct{ Alpha, Sigma, Affine float64 }
