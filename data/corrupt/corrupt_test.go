package corrupt

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// deterministicTolerance is the per-value tolerance of the README table
// "Determinism and recommended tolerances" for the cases without draws.
var deterministicTolerance = map[string]int{
	// Pillow's integer BOX resampling, reproduced exactly.
	"pixelate": 0,
	// ImageMagick Q16 sums with floor(q16/257), reproduced exactly.
	fixedAngleCase: 0,
	// float64 with numpy's op order; another summation order of the
	// channel mean or of skimage's HSV may flip one truncation.
	"contrast":   1,
	"brightness": 1,
	// OpenCV filters the 17×17 / 21×21 kernel through a DFT; we correlate
	// directly, which differs in the last bits and may flip a truncation.
	"defocus_blur": 1,
	// float32 accumulation as in the original; scipy's zoom may round a
	// product differently in the last bit.
	"zoom_blur": 1,
}

func TestDeterministicAgainstFixtures(t *testing.T) {
	m := loadManifest(t)
	for _, cas := range m.DeterministicCases {
		if cas == "jpeg_compression" {
			continue // compared by mean difference in TestJPEGCompression
		}
		tol, ok := deterministicTolerance[cas]
		if !ok {
			t.Errorf("manifest lists deterministic case %q that the test does not know", cas)
			continue
		}
		for _, ds := range m.datasets() {
			for _, sev := range ds.severities {
				for _, name := range ds.images {
					ref := m.reference(t, ds, cas, sev, name)
					if ref == nil {
						continue
					}
					clean := m.clean(t, ds, name)
					var got *Image
					var err error
					if cas == fixedAngleCase {
						got, err = MotionBlurAngle(clean, sev, ds.preset, m.FixedAngleDeg)
					} else {
						got, err = Apply(clean, cas, sev, Config{Preset: ds.preset}, nil)
					}
					if err != nil {
						t.Errorf("%s/%s/s%d/%s: %v", ds.dir, cas, sev, name, err)
						continue
					}
					d := compare(got, ref, tol)
					t.Logf("%s/%s/s%d/%s: %v (tolerance %d)", ds.dir, cas, sev, name, d, tol)
					if d.max > tol {
						t.Errorf("%s/%s/s%d/%s: %v, tolerance %d", ds.dir, cas, sev, name, d, tol)
					}
				}
			}
		}
	}
}

// jpegMADTolerance: Go's image/jpeg encoder and decoder are not
// libjpeg-turbo (no fancy upsampling, other rounding); the README measured
// MAD 0.1–3.0 against the fixtures and recommends MAD ≤ 4.
const jpegMADTolerance = 4

func TestJPEGCompression(t *testing.T) {
	m := loadManifest(t)
	const cas = "jpeg_compression"
	for _, ds := range m.datasets() {
		for _, sev := range ds.severities {
			for _, name := range ds.images {
				ref := m.reference(t, ds, cas, sev, name)
				if ref == nil {
					continue
				}
				got, err := Apply(m.clean(t, ds, name), cas, sev, Config{Preset: ds.preset}, nil)
				if err != nil {
					t.Fatal(err)
				}
				d := compare(got, ref, 255)
				t.Logf("%s/%s/s%d/%s: %v", ds.dir, cas, sev, name, d)
				if d.mad > jpegMADTolerance {
					t.Errorf("%s/%s/s%d/%s: MAD %.3f > %d", ds.dir, cas, sev, name, d.mad, jpegMADTolerance)
				}
			}
		}
	}
}

// replayTolerance is the per-value tolerance when the recorded numpy draws
// are replayed.
var replayTolerance = map[string]int{
	"gaussian_noise":    0,
	"shot_noise":        0,
	"impulse_noise":     0,
	"glass_blur":        0,
	"motion_blur":       0,
	"snow":              0,
	"frost":             0,
	"fog":               0,
	"elastic_transform": 0,
}

func TestReplayAgainstFixtures(t *testing.T) {
	m := loadManifest(t)
	frost := frostDir(t)
	for _, ds := range m.datasets() {
		runs := loadDraws(t, m, ds)
		keys := make([]string, 0, len(runs))
		for k := range runs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		replayed := map[string]int{}
		for _, key := range keys {
			parts := strings.Split(key, "/")
			if len(parts) != 3 {
				t.Fatalf("draws key %q is not case/sSEV/name", key)
			}
			cas, name := parts[0], parts[2]
			var sev int
			if _, err := fmt.Sscanf(parts[1], "s%d", &sev); err != nil {
				t.Fatalf("draws key %q: %v", key, err)
			}
			if slices.Contains(m.DeterministicCases, cas) {
				if len(runs[key].Calls) != 0 {
					t.Errorf("%s: deterministic case with %d draws", key, len(runs[key].Calls))
				}
				continue
			}
			tol, ok := replayTolerance[cas]
			if !ok {
				t.Errorf("draws list random case %q that the test does not know", cas)
				continue
			}
			vals, full := runs[key].values()
			if !full {
				continue // only a summary was kept for the large draws
			}
			ref := m.reference(t, ds, cas, sev, name)
			if ref == nil {
				t.Errorf("%s: draws recorded but no reference image in the manifest", key)
				continue
			}
			rp := NewReplay(vals)
			got, err := Apply(m.clean(t, ds, name), cas, sev, Config{Preset: ds.preset, FrostDir: frost}, rp)
			if err != nil {
				t.Errorf("%s: %v", key, err)
				continue
			}
			if err := rp.Err(); err != nil {
				t.Errorf("%s/%s: %v", ds.dir, key, err)
			}
			if n := rp.Remaining(); n != 0 {
				t.Errorf("%s/%s: %d recorded draws left unused", ds.dir, key, n)
			}
			if cas == "frost" {
				tol = frostReplayTolerance(t, m, ds, sev, vals)
			}
			d := compare(got, ref, tol)
			replayed[cas]++
			t.Logf("%s/%s: %v (tolerance %d)", ds.dir, key, d, tol)
			if d.max > tol {
				t.Errorf("%s/%s: %v, tolerance %d", ds.dir, key, d, tol)
			}
		}
		t.Logf("%s: replayed runs per case: %v", ds.dir, replayed)
	}
}

// frostJPEGDecodeMax is the README's largest difference between Go's and
// libjpeg-turbo's decoding of frost4.jpg / frost5.jpg (3 and 6 grey levels).
const frostJPEGDecodeMax = 6

// frostReplayTolerance is 0 for the PNG overlays, which decode identically,
// and ceil(weight·6) for the JPEG overlays, whose decoded pixels differ by
// up to 6 and enter the blend with the frost weight.
func frostReplayTolerance(t *testing.T, m *manifest, ds dataset, sev int, draws []float64) int {
	var ff struct {
		Files []struct {
			Index int    `json:"index"`
			File  string `json:"file"`
		} `json:"files"`
	}
	readJSON(t, filepath.Join(m.dir, "helpers", "frost_files.json"), &ff)
	idx := int(draws[0])
	for _, f := range ff.Files {
		if f.Index == idx && strings.HasSuffix(f.File, ".png") {
			return 0
		}
	}
	p, err := Params("frost", ds.preset, sev)
	if err != nil {
		t.Fatal(err)
	}
	return int(math.Ceil(p.(FrostParams).Frost * frostJPEGDecodeMax))
}
