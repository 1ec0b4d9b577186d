package corrupt

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func presetOf(t *testing.T, dataset string) Preset {
	t.Helper()
	switch dataset {
	case "cifar":
		return CIFAR
	case "imagenet":
		return ImageNet
	}
	t.Fatalf("unknown dataset %q", dataset)
	return 0
}

// TestMotionKernels checks the registry's (radius, σ) of motion_blur and
// snow, and the weights and tap offsets, against helpers/motion_blur_kernels.json.
func TestMotionKernels(t *testing.T) {
	m := loadManifest(t)
	var f struct {
		Angle   float64 `json:"angle_for_offsets_deg"`
		Kernels []struct {
			Dataset, Corruption string
			Severity            int
			Radius, Sigma       float64
			Width               int
			Weights             []float64
			Offsets             [][2]int `json:"offsets_dx_dy_at_angle"`
		} `json:"kernels"`
	}
	readJSON(t, filepath.Join(m.dir, "helpers", "motion_blur_kernels.json"), &f)
	if len(f.Kernels) == 0 {
		t.Fatal("no kernels in motion_blur_kernels.json")
	}
	for _, k := range f.Kernels {
		id := fmt.Sprintf("%s/%s/s%d", k.Dataset, k.Corruption, k.Severity)
		p, err := Params(k.Corruption, presetOf(t, k.Dataset), k.Severity)
		if err != nil {
			t.Fatal(err)
		}
		var radius, sigma float64
		switch p := p.(type) {
		case MotionParams:
			radius, sigma = p.Radius, p.Sigma
		case SnowParams:
			radius, sigma = p.Radius, p.Sigma
		default:
			t.Fatalf("%s: unexpected parameters %T", id, p)
		}
		if radius != k.Radius || sigma != k.Sigma {
			t.Errorf("%s: registry has radius %v σ %v, fixture %v %v", id, radius, sigma, k.Radius, k.Sigma)
		}
		w, dx, dy := motionKernel(radius, sigma, f.Angle)
		if len(w) != k.Width || len(k.Weights) != k.Width || len(k.Offsets) != k.Width {
			t.Errorf("%s: width %d, fixture %d", id, len(w), k.Width)
			continue
		}
		worst := 0.0
		for i := range w {
			worst = max(worst, math.Abs(w[i]-k.Weights[i]))
			if dx[i] != k.Offsets[i][0] || dy[i] != k.Offsets[i][1] {
				t.Errorf("%s: tap %d at (%d, %d), fixture %v", id, i, dx[i], dy[i], k.Offsets[i])
			}
		}
		t.Logf("%s: worst weight difference %.3g", id, worst)
		if worst > 1e-15 { // same formula in float64; allow a few ulp of exp
			t.Errorf("%s: weights differ by %.3g", id, worst)
		}
	}
}

// TestMotionOffsets checks the tap offsets at the angles ImageMagick was
// measured at (helpers/motion_blur_offsets.json).
func TestMotionOffsets(t *testing.T) {
	m := loadManifest(t)
	var f struct {
		Offsets []struct {
			Angle, Radius, Sigma float64
			Offsets              [][2]int `json:"offsets_dx_dy"`
		} `json:"offsets"`
	}
	readJSON(t, filepath.Join(m.dir, "helpers", "motion_blur_offsets.json"), &f)
	for _, o := range f.Offsets {
		_, dx, dy := motionKernel(o.Radius, o.Sigma, o.Angle)
		if len(dx) != len(o.Offsets) {
			t.Errorf("angle %v: %d taps, fixture %d", o.Angle, len(dx), len(o.Offsets))
			continue
		}
		bad := 0
		for i := range dx {
			if dx[i] != o.Offsets[i][0] || dy[i] != o.Offsets[i][1] {
				bad++
			}
		}
		t.Logf("angle %v radius %v: %d of %d taps differ", o.Angle, o.Radius, bad, len(dx))
		if bad > 0 {
			t.Errorf("angle %v: %d taps differ", o.Angle, bad)
		}
	}
}

// TestDiskKernels checks the registry's defocus parameters and disk() against
// helpers/defocus_disk_kernels.json (exact float32 values).
func TestDiskKernels(t *testing.T) {
	m := loadManifest(t)
	var f struct {
		Kernels []struct {
			Dataset   string
			Severity  int
			Radius    float64
			AliasBlur float64 `json:"alias_blur"`
			Shape     [2]int
			Values    [][]float64
			Sum       float64 `json:"sum_float64"`
		} `json:"kernels"`
	}
	readJSON(t, filepath.Join(m.dir, "helpers", "defocus_disk_kernels.json"), &f)
	for _, k := range f.Kernels {
		id := fmt.Sprintf("%s/s%d", k.Dataset, k.Severity)
		p, err := Params("defocus_blur", presetOf(t, k.Dataset), k.Severity)
		if err != nil {
			t.Fatal(err)
		}
		if dp := p.(DefocusParams); dp.Radius != k.Radius || dp.AliasBlur != k.AliasBlur {
			t.Errorf("%s: registry %+v, fixture radius %v alias %v", id, dp, k.Radius, k.AliasBlur)
		}
		got, n := diskKernel(k.Radius, k.AliasBlur)
		if n != k.Shape[0] || n != k.Shape[1] {
			t.Errorf("%s: %d×%d, fixture %v", id, n, n, k.Shape)
			continue
		}
		worst, sum := 0.0, 0.0
		for i := range n {
			for j := range n {
				worst = max(worst, math.Abs(float64(got[i*n+j])-k.Values[i][j]))
				sum += float64(got[i*n+j])
			}
		}
		t.Logf("%s: worst difference %.3g, sum %.8f (fixture %.8f)", id, worst, sum, k.Sum)
		// OpenCV's vectorised filter may round a float32 sum differently:
		// allow 2 float32 ulps of the largest kernel values (≈0.03, ulp
		// 1.9e-9). The blurred images stay exact (TestDeterministic…).
		if worst > 4e-9 {
			t.Errorf("%s: kernel differs by %.3g", id, worst)
		}
	}
}

// TestZoomFactors checks arange and the clipped-zoom sizes against
// helpers/zoom_factors.json for zoom_blur and snow.
func TestZoomFactors(t *testing.T) {
	m := loadManifest(t)
	var f struct {
		Tables []struct {
			Dataset, Corruption string
			Severity            int
			NFactors            int `json:"n_factors"`
			Factors             []struct {
				Z                     float64
				Ch, Top, Zoomed, Trim int
			}
		} `json:"tables"`
	}
	readJSON(t, filepath.Join(m.dir, "helpers", "zoom_factors.json"), &f)
	for _, tb := range f.Tables {
		id := fmt.Sprintf("%s/%s/s%d", tb.Dataset, tb.Corruption, tb.Severity)
		pr := presetOf(t, tb.Dataset)
		p, err := Params(tb.Corruption, pr, tb.Severity)
		if err != nil {
			t.Fatal(err)
		}
		var zs []float64
		switch p := p.(type) {
		case ZoomParams:
			zs = arange(p.Start, p.Stop, p.Step)
		case SnowParams:
			zs = []float64{p.Zoom}
		default:
			t.Fatalf("%s: unexpected parameters %T", id, p)
		}
		if len(zs) != tb.NFactors || len(tb.Factors) != tb.NFactors {
			t.Errorf("%s: %d factors, fixture %d", id, len(zs), tb.NFactors)
			continue
		}
		for i, fz := range tb.Factors {
			ch, top, zoomed, trim := zoomGeometry(pr.Size(), zs[i])
			if zs[i] != fz.Z || ch != fz.Ch || top != fz.Top || zoomed != fz.Zoomed || trim != fz.Trim {
				t.Errorf("%s factor %d: z %v ch %d top %d zoomed %d trim %d, fixture %+v", id, i, zs[i], ch, top, zoomed, trim, fz)
			}
		}
	}
}

// TestGlassPreShuffle checks the first Gaussian of glass_blur against the
// float64 fields of helpers/glass_pre_shuffle_cifar_<image>.json (those the
// manifest lists) and the truncated uint8 images of helpers/glass_pre_shuffle/.
func TestGlassPreShuffle(t *testing.T) {
	m := loadManifest(t)
	cifar := m.datasets()[0]
	fields := 0
	for _, file := range m.Files {
		name, ok := strings.CutPrefix(file.Path, "helpers/glass_pre_shuffle_cifar_")
		if !ok || !strings.HasSuffix(name, ".json") {
			continue
		}
		name = strings.TrimSuffix(name, ".json")
		var f struct {
			Severities []struct {
				Severity int
				Sigma    float64
				Values   [][][]float64
			}
		}
		readJSON(t, filepath.Join(m.dir, file.Path), &f)
		clean := m.clean(t, cifar, name)
		for _, s := range f.Severities {
			g := gaussianFilter(toFloat(clean), clean.H, clean.W, 3, s.Sigma, 4, borderNearest)
			worst := 0.0
			for y := range clean.H {
				for x := range clean.W {
					for c := range 3 {
						worst = max(worst, math.Abs(g[(y*clean.W+x)*3+c]-s.Values[y][x][c]))
					}
				}
			}
			t.Logf("cifar/s%d/%s: worst float64 difference %.3g", s.Severity, name, worst)
			if worst > 0 {
				t.Errorf("cifar/s%d/%s: Gaussian differs by %.3g; scipy's summation order is reproduced, expected 0", s.Severity, name, worst)
			}
		}
		fields++
	}
	if fields == 0 {
		t.Log("manifest lists no helpers/glass_pre_shuffle_cifar_*.json: float64 fields not checked")
	}
	n := 0
	for _, file := range m.Files {
		rel, ok := strings.CutPrefix(file.Path, "helpers/glass_pre_shuffle/")
		if !ok {
			continue
		}
		var ds, name string
		var sev int
		parts := strings.Split(rel, "/")
		if len(parts) != 3 {
			t.Fatalf("unexpected path %s", file.Path)
		}
		ds, name = parts[0], strings.TrimSuffix(parts[2], ".png")
		if _, err := fmt.Sscanf(parts[1], "s%d", &sev); err != nil {
			t.Fatalf("%s: %v", file.Path, err)
		}
		pr := presetOf(t, ds)
		p, err := Params("glass_blur", pr, sev)
		if err != nil {
			t.Fatal(err)
		}
		in := m.png(t, "clean/"+ds+"/"+name+".png")
		g := gaussianFilter(toFloat(in), in.H, in.W, 3, p.(GlassParams).Sigma, 4, borderNearest)
		got := NewImage(in.H, in.W)
		for i, v := range g {
			got.Pix[i] = truncate(v * 255)
		}
		d := compare(got, m.png(t, file.Path), 0)
		t.Logf("%s: %v", rel, d)
		if d.max > 0 {
			t.Errorf("%s: %v", rel, d)
		}
		n++
	}
	if n == 0 {
		t.Error("manifest lists no helpers/glass_pre_shuffle images")
	}
}
