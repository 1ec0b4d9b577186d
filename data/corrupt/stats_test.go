package corrupt

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"testing"
)

// summary is one metric of stats.json: over the 20 seeds of the original.
type summary struct {
	Mean *float64 `json:"mean"`
	Std  *float64 `json:"std"`
}

type statsFile struct {
	Metrics            map[string]string `json:"metrics"` // groups like mean_r/g/b count once
	Images             []string          `json:"images"`
	DeterministicCases []string          `json:"deterministic_cases"`
	CIFAR              map[string]map[string]struct {
		PerImage map[string]map[string]json.RawMessage `json:"per_image"`
	} `json:"cifar"`
}

// statsSeeds is the number of Go seeds averaged per (case, severity,
// image); the README calibrated its check with 20.
const statsSeeds = 20

// TestStatisticsWithPCG runs every random corruption with our own RNG and
// checks the seed-averaged metrics against the 20-seed statistics of the
// original code with the README's rule
// |mean_go − mean| ≤ max(2·std, 0.02·|mean|, 0.25).
func TestStatisticsWithPCG(t *testing.T) {
	m := loadManifest(t)
	var st statsFile
	readJSON(t, filepath.Join(m.dir, "stats.json"), &st)
	cifar := m.datasets()[0]
	frost := frostDir(t)
	index := map[string]int{}
	for _, im := range m.CIFARImages {
		index[im.Name] = im.Index
	}
	cases := make([]string, 0, len(st.CIFAR))
	for c := range st.CIFAR {
		cases = append(cases, c)
	}
	sort.Strings(cases)
	for _, cas := range cases {
		if slices.Contains(st.DeterministicCases, cas) {
			continue // checked value by value in TestDeterministicAgainstFixtures
		}
		sevs := make([]string, 0, len(st.CIFAR[cas]))
		for s := range st.CIFAR[cas] {
			sevs = append(sevs, s)
		}
		sort.Strings(sevs)
		for _, sk := range sevs {
			var sev int
			if _, err := fmt.Sscanf(sk, "s%d", &sev); err != nil {
				t.Fatalf("stats.json: severity key %q", sk)
			}
			for _, name := range st.Images {
				ref, ok := st.CIFAR[cas][sk].PerImage[name]
				if !ok {
					t.Fatalf("stats.json: no %s/%s/%s", cas, sk, name)
				}
				clean := m.clean(t, cifar, name)
				avg := metrics{}
				for r := range statsSeeds {
					src, err := NewSource(uint64(r), index[name], cas, sev)
					if err != nil {
						t.Fatal(err)
					}
					out, err := Apply(clean, cas, sev, Config{Preset: CIFAR, FrostDir: frost}, src)
					if err != nil {
						t.Fatal(err)
					}
					for k, v := range measure(out, clean) {
						avg[k] += v / statsSeeds
					}
				}
				worst, worstKey := 0.0, ""
				checked := 0
				for k, raw := range ref {
					var s summary
					if len(raw) == 0 || raw[0] != '{' {
						continue // a count such as distinct_outputs, not a metric
					}
					if err := json.Unmarshal(raw, &s); err != nil {
						t.Fatalf("stats.json: %s/%s/%s/%s: %v", cas, sk, name, k, err)
					}
					checked++
					if _, ok := avg[k]; !ok {
						t.Fatalf("stats.json metric %q is not computed by the test", k)
					}
					if s.Mean == nil || s.Std == nil || math.IsNaN(avg[k]) {
						continue // PSNR is null when the output equals the input
					}
					tol := max(2**s.Std, 0.02*math.Abs(*s.Mean), 0.25)
					ratio := math.Abs(avg[k]-*s.Mean) / tol
					if ratio > worst {
						worst, worstKey = ratio, k
					}
					if ratio > 1 {
						t.Errorf("cifar/%s/%s/%s: %s = %.4f, original %.4f ± %.4f (tolerance %.4f)",
							cas, sk, name, k, avg[k], *s.Mean, *s.Std, tol)
					}
				}
				if checked < len(st.Metrics) {
					t.Errorf("cifar/%s/%s/%s: only %d metrics in stats.json", cas, sk, name, checked)
				}
				t.Logf("cifar/%s/%s/%s: worst metric %s at %.2f of its tolerance", cas, sk, name, worstKey, worst)
			}
		}
	}
}
