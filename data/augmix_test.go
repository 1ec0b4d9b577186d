package data

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestApplyAugMixOpParameters draws each operation many times on a 90×90
// image and requires every result to be the operation at one of the
// parameters severity 1 allows (L in [0.1, 1)), and every allowed
// parameter to occur: posterize keeps 4 bits; solarize's threshold is
// 256 − int(25.6·L) ∈ [231, 254]; rotate turns by 0, ±1 or ±2 degrees;
// translate shifts by 0, ±1 or ±2 pixels (int(L·30/10) for a 90-pixel
// image); shear's |s| = 0.03·L lies in [0.003, 0.03).
func TestApplyAugMixOpParameters(t *testing.T) {
	img := patternRGB(90, 90)
	rng := rand.New(rand.NewPCG(1, 2))
	const draws = 200
	match := func(op AugMixOp, got *RGB, params []float64, apply func(float64) (*RGB, error)) float64 {
		for _, p := range params {
			want, err := apply(p)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Equal(got.Pix, want.Pix) {
				return p
			}
		}
		t.Fatalf("%v: the result is none of the allowed parameters %v", op, params)
		return 0
	}
	ints := func(lo, hi int) (p []float64) {
		for v := lo; v <= hi; v++ {
			p = append(p, float64(v))
		}
		return p
	}
	tests := []struct {
		op     AugMixOp
		params []float64
		apply  func(float64) (*RGB, error)
	}{
		{OpPosterize, []float64{4}, func(p float64) (*RGB, error) { return Posterize(img, int(p)) }},
		{OpSolarize, ints(231, 254), func(p float64) (*RGB, error) { return Solarize(img, int(p)) }},
		{OpRotate, ints(-2, 2), func(p float64) (*RGB, error) { return Rotate(img, p, MEMOFill) }},
		{OpTranslateX, ints(-2, 2), func(p float64) (*RGB, error) { return TranslateX(img, int(p), MEMOFill) }},
		{OpTranslateY, ints(-2, 2), func(p float64) (*RGB, error) { return TranslateY(img, int(p), MEMOFill) }},
	}
	for _, tt := range tests {
		seen := map[float64]int{}
		for range draws {
			got, err := ApplyAugMixOp(img, tt.op, MEMOFill, rng)
			if err != nil {
				t.Fatal(err)
			}
			seen[match(tt.op, got, tt.params, tt.apply)]++
		}
		// Solarize's 24 thresholds are not all likely in 200 draws;
		// the others' few values are.
		if tt.op != OpSolarize && len(seen) != len(tt.params) {
			t.Errorf("%v: parameters drawn %v, want all of %v", tt.op, seen, tt.params)
		}
		if tt.op == OpSolarize && len(seen) < 15 {
			t.Errorf("%v: only %d thresholds in %d draws", tt.op, len(seen), draws)
		}
	}
	// Shear's parameter is continuous: replay the random source (level,
	// then sign) and compare with the shear at that value.
	for _, op := range []AugMixOp{OpShearX, OpShearY} {
		pos, neg := 0, 0
		for k := range draws {
			seed := uint64(k)
			got, err := ApplyAugMixOp(img, op, MEMOFill, rand.New(rand.NewPCG(seed, 9)))
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(seed, 9))
			level := 0.1 + 0.9*r.Float64()
			s := level * 0.3 / 10
			if r.Float64() > 0.5 {
				s, neg = -s, neg+1
			} else {
				pos++
			}
			if math.Abs(s) < 0.003 || math.Abs(s) >= 0.03 {
				t.Fatalf("%v: s = %v", op, s)
			}
			shear := ShearX
			if op == OpShearY {
				shear = ShearY
			}
			want, _ := shear(img, s, MEMOFill)
			if !slices.Equal(got.Pix, want.Pix) {
				t.Fatalf("%v: draw %d differs from the shear by %v", op, k, s)
			}
		}
		if pos < draws/4 || neg < draws/4 {
			t.Errorf("%v: %d positive and %d negative shears", op, pos, neg)
		}
	}
	if _, err := ApplyAugMixOp(img, numAugMixOps, MEMOFill, rng); err == nil {
		t.Error("an unknown operation was accepted")
	}
}

// TestAugMixConvex: on an image every operation leaves unchanged (one
// level, 0x50, fixed by posterize and below every solarize threshold, with
// the fill of the same colour), the mix is a convex combination of equal
// images: 80/255 up to float32 rounding of the weights (1e-6). On a
// general image every output lies between the darkest and brightest
// level, and the same random source gives the same bits.
func TestAugMixConvex(t *testing.T) {
	flat := NewRGB(16, 16)
	for i := range flat.Pix {
		flat.Pix[i] = 0x50
	}
	fill := [3]uint8{0x50, 0x50, 0x50}
	for seed := range uint64(20) {
		out, err := AugMix(nil, flat, fill, rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range out {
			if math.Abs(float64(v)-80.0/255) > 1e-6 {
				t.Fatalf("seed %d, value %d = %v, want 80/255", seed, i, v)
			}
		}
	}
	img := patternRGB(24, 24)
	a, err := AugMix(nil, img, MEMOFill, rand.New(rand.NewPCG(5, 5)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := AugMix(make([]float32, 10), img, MEMOFill, rand.New(rand.NewPCG(5, 5)))
	c, _ := AugMix(nil, img, MEMOFill, rand.New(rand.NewPCG(6, 5)))
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Error("AugMix is not determined by its random source")
	}
	if len(a) != 3*24*24 {
		t.Fatalf("%d values, want %d", len(a), 3*24*24)
	}
	for i, v := range a {
		if v < 0 || v > 1 {
			t.Fatalf("value %d = %v outside [0, 1]", i, v)
		}
	}
	if _, err := AugMix(nil, &RGB{W: 1, H: 1}, MEMOFill, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Error("a malformed image was accepted")
	}
}

// TestAugMixReplay recomputes one AugMix output from its parts, replaying
// the random source: w ~ Dirichlet(1,1,1) from three Exp(1) draws, m
// uniform, then each chain's depth and operations; the output must equal
// m·t(x0) + (1−m)·Σ wᵢ·t(chainᵢ) in float32 bit for bit, and the weights
// sum to 1 within float32 rounding.
func TestAugMixReplay(t *testing.T) {
	img := patternRGB(20, 20)
	got, err := AugMix(nil, img, HarnessFill, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	g := [3]float64{r.ExpFloat64(), r.ExpFloat64(), r.ExpFloat64()}
	s := g[0] + g[1] + g[2]
	w := [3]float32{float32(g[0] / s), float32(g[1] / s), float32(g[2] / s)}
	if d := math.Abs(float64(w[0]+w[1]+w[2]) - 1); d > 2e-7 {
		t.Errorf("weights sum to 1 ± %v", d)
	}
	m := float32(r.Float64())
	var chains [3]*RGB
	for i := range chains {
		chains[i] = img
		for range 1 + r.IntN(3) {
			chains[i], err = ApplyAugMixOp(chains[i], AugMixOp(r.IntN(9)), HarnessFill, r)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	plane := 400
	for c := range 3 {
		for j := range plane {
			var mix float32
			for i := range chains {
				mix += float32(w[i] * (float32(chains[i].Pix[3*j+c]) / 255))
			}
			want := float32(m*(float32(img.Pix[3*j+c])/255)) + float32((1-m)*mix)
			if got[c*plane+j] != want {
				t.Fatalf("channel %d pixel %d: %v, want %v", c, j, got[c*plane+j], want)
			}
		}
	}
}

// TestAugMixViews: v views of the preprocessor's size, normalised (their
// un-normalised values lie in [0, 1]), all different, and determined by
// the random source.
func TestAugMixViews(t *testing.T) {
	p := NewCLIPPreprocessor(32)
	img := patternRGB(40, 30)
	a, err := p.AugMixViews(nil, img, 3, ViewRNG(1, "d", 0))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.AugMixViews(nil, img, 3, ViewRNG(1, "d", 0))
	n := p.OutputLen()
	if len(a) != 3*n || !slices.Equal(a, b) {
		t.Fatal("AugMix views are not determined by their random source")
	}
	if slices.Equal(a[:n], a[n:2*n]) || slices.Equal(a[n:2*n], a[2*n:]) {
		t.Error("two views are equal")
	}
	raw, err := p.Unnormalize(nil, a)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range raw {
		if v < -1e-6 || v > 1+1e-6 {
			t.Fatalf("un-normalised value %d = %v outside [0, 1]", i, v)
		}
	}
	if _, err := p.AugMixViews(nil, img, 0, ViewRNG(1, "d", 0)); err == nil {
		t.Error("0 views accepted")
	}
	if _, err := p.AugMixViews(nil, nil, 2, ViewRNG(1, "d", 0)); err == nil {
		t.Error("a nil image was accepted")
	}
}

// BenchmarkAugMixViews makes MEMO's 64 AugMix views of a CIFAR image at
// 224×224.
func BenchmarkAugMixViews(b *testing.B) {
	p := NewCLIPPreprocessor(224)
	img := patternRGB(32, 32)
	dst := make([]float32, 64*p.OutputLen())
	for b.Loop() {
		if _, err := p.AugMixViews(dst, img, 64, ViewRNG(1, "d", 0)); err != nil {
			b.Fatal(err)
		}
	}
}
