package corrupt

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// manifest is the part of fixtures/corruptions/manifest.json the tests use.
type manifest struct {
	Cases              []string       `json:"cases"`
	DeterministicCases []string       `json:"deterministic_cases"`
	FixedAngleDeg      float64        `json:"motion_blur_fixed_angle_deg"`
	CaseIndex          map[string]int `json:"case_index_k"`
	CIFARImages        []struct {
		Index int    `json:"index"`
		Name  string `json:"name"`
	} `json:"cifar_images"`
	ImageNetImages []struct {
		Index int    `json:"index"`
		Name  string `json:"name"`
	} `json:"imagenet_images"`
	ImageNetSeverities []int `json:"imagenet_severities"`
	Files              []struct {
		Path string `json:"path"`
	} `json:"files"`

	dir string // fixtures/corruptions
	has map[string]bool
}

// fixedAngleCase is the fixtures' 16th case: motion_blur at a constant angle.
const fixedAngleCase = "motion_blur_fixed_angle"

func loadManifest(t testing.TB) *manifest {
	t.Helper()
	p := fixture.Path(t, "fixtures/corruptions/manifest.json")
	var m manifest
	readJSON(t, p, &m)
	m.dir = filepath.Dir(p)
	m.has = map[string]bool{}
	for _, f := range m.Files {
		m.has[f.Path] = true
	}
	return &m
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// dataset describes one of the two fixture sets.
type dataset struct {
	preset     Preset
	dir        string // "cifar" or "imagenet"
	images     []string
	severities []int
}

func (m *manifest) datasets() []dataset {
	var c, in dataset
	c = dataset{preset: CIFAR, dir: "cifar", severities: []int{1, 2, 3, 4, 5}}
	for _, im := range m.CIFARImages {
		c.images = append(c.images, im.Name)
	}
	in = dataset{preset: ImageNet, dir: "imagenet", severities: m.ImageNetSeverities}
	for _, im := range m.ImageNetImages {
		in.images = append(in.images, im.Name)
	}
	return []dataset{c, in}
}

// clean returns the clean input image of a data set.
func (m *manifest) clean(t testing.TB, ds dataset, name string) *Image {
	t.Helper()
	return m.png(t, fmt.Sprintf("clean/%s/%s.png", ds.dir, name))
}

// reference returns the stored uint8 output of the original code, or nil
// when the manifest does not list it.
func (m *manifest) reference(t testing.TB, ds dataset, cas string, sev int, name string) *Image {
	t.Helper()
	rel := fmt.Sprintf("%s/%s/s%d/%s.png", ds.dir, cas, sev, name)
	if !m.has[rel] {
		return nil
	}
	return m.png(t, rel)
}

func (m *manifest) png(t testing.TB, rel string) *Image {
	t.Helper()
	img, err := ReadFile(filepath.Join(m.dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func frostDir(t testing.TB) string {
	return filepath.Dir(fixture.Path(t, "assets/corruptions/frost1.png"))
}

// diff summarises |a − b| over all values.
type diff struct {
	max, over int     // largest difference, values above the tolerance
	mad       float64 // mean absolute difference
	n         int
}

func compare(a, b *Image, tol int) diff {
	var d diff
	if a.H != b.H || a.W != b.W {
		return diff{max: 256, over: len(b.Pix), n: len(b.Pix)}
	}
	sum := 0
	for i := range a.Pix {
		v := int(a.Pix[i]) - int(b.Pix[i])
		if v < 0 {
			v = -v
		}
		sum += v
		d.max = max(d.max, v)
		if v > tol {
			d.over++
		}
	}
	d.n = len(a.Pix)
	d.mad = float64(sum) / float64(len(a.Pix))
	return d
}

func (d diff) String() string {
	return fmt.Sprintf("max %d, mean %.4f, %d of %d values above tolerance", d.max, d.mad, d.over, d.n)
}

// drawRun is one run of draws/*.json.
type drawRun struct {
	Seed  int64 `json:"seed"`
	Calls []struct {
		Fn      string                     `json:"fn"`
		Args    []json.RawMessage          `json:"args"`
		Kwargs  map[string]json.RawMessage `json:"kwargs"`
		Count   int                        `json:"count"`
		NValues int                        `json:"n_values"`
		Values  []float64                  `json:"values"`
	} `json:"calls"`
}

// values returns every recorded draw in order, or false when some call
// kept only a summary.
func (r drawRun) values() ([]float64, bool) {
	var out []float64
	for _, c := range r.Calls {
		if len(c.Values) != c.NValues {
			return nil, false
		}
		out = append(out, c.Values...)
	}
	return out, true
}

var drawsCache sync.Map

func loadDraws(t testing.TB, m *manifest, ds dataset) map[string]drawRun {
	t.Helper()
	p := filepath.Join(m.dir, "draws", ds.dir+"_draws.json")
	if v, ok := drawsCache.Load(p); ok {
		return v.(map[string]drawRun)
	}
	var f struct {
		Runs map[string]drawRun `json:"runs"`
	}
	readJSON(t, p, &f)
	drawsCache.Store(p, f.Runs)
	return f.Runs
}

// metrics are the statistics of stats.json for one output.
type metrics map[string]float64

func measure(out, clean *Image) metrics {
	m := metrics{}
	n := float64(len(out.Pix))
	sad, sse := 0.0, 0.0
	var sum, sum2 [3]float64
	for i, v := range out.Pix {
		d := float64(v) - float64(clean.Pix[i])
		sad += math.Abs(d)
		sse += d * d
		sum[i%3] += float64(v)
	}
	px := n / 3
	var mean [3]float64
	for c := range 3 {
		mean[c] = sum[c] / px
	}
	for i, v := range out.Pix {
		d := float64(v) - mean[i%3]
		sum2[i%3] += d * d
	}
	m["mad"] = sad / n
	if sse > 0 {
		m["psnr"] = 10 * math.Log10(255*255/(sse/n))
	} else {
		m["psnr"] = math.NaN()
	}
	for c, ch := range []string{"r", "g", "b"} {
		m["mean_"+ch] = mean[c]
		m["std_"+ch] = math.Sqrt(sum2[c] / px)
	}
	return m
}
