package feature

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// TestDMNMemoryTTA2 streams the pool images through one memory in the
// fixture's order, from the stored encode_image features and dmn.T, and
// compares every stored intermediate after every image: probabilities,
// mean probability, the memory's features and entropies, p_mem and the
// final score at 1e-5 relative to each tensor's max; entropies at 1e-5
// relative (README tolerances, fp32 against our float64 on the same fp32
// features); selections, pseudo-labels, counts, the memory action and the
// prediction exactly.
//
// It runs on the shared set and on the variant of
// setECALPDuplicateVariant (other head counts, renamed folders, another
// ECALP stream).
func TestDMNMemoryTTA2(t *testing.T) {
	t.Run("public", dmnMemoryRun)
	t.Run("variant", func(t *testing.T) {
		setECALPDuplicateVariant(t, ecalpOrders[1])
		dmnMemoryRun(t)
	})
}

func dmnMemoryRun(t *testing.T) {
	x, cfg := readTTA2(t)
	dc := cfg.Config.DMN
	head := x.Dense("dmn.T")
	c, d := head.Dims()
	info, _ := x.Info("dmn.mem_features")
	if want := []int{len(dc.Images), c, dc.MemorySize, d}; !slices.Equal(info.Shape, want) {
		t.Fatalf("dmn.mem_features: shape %v, want %v from the config and head", info.Shape, want)
	}
	if len(cfg.DMN.PerImage) != len(dc.Images) {
		t.Fatalf("dmn.per_image has %d entries for images %v", len(cfg.DMN.PerImage), dc.Images)
	}
	mem, err := NewDMNMemory(head, DMNConfig{
		Capacity: dc.MemorySize, Beta: dc.Beta, SelectionP: dc.SelectionP,
		Weight: dc.WeightMem, Scale: x.Scalar("logit_scale_exp"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, img := range dc.Images {
		what := fmt.Sprintf("dmn image %d", img)
		r, err := mem.Step(poolFeatures(x, cfg, "views.image_features", img))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Selection.Kept) != dc.NSelected {
			t.Errorf("%s: kept %d views, config says %d", what, len(r.Selection.Kept), dc.NSelected)
		}
		fxt.CompareDense(t, what+" probs", r.Probs, sliceDense(x, "dmn.probs_text", k), 1e-5, fxt.Rel)
		cmp := func(name string, got []float64) {
			want, _ := slice(x, "dmn."+name, k)
			fxt.Compare(t, what+" "+name, got, want, 1e-5, fxt.Rel)
		}
		cmp("view_entropy", r.Selection.Entropy)
		fxt.CompareInts(t, what+" selected", r.Selection.Kept, sliceInts(x, "dmn.selected", k))
		cmp("mean_prob", r.MeanProb)
		fxt.CompareInts(t, what+" pseudo-label", []int{r.PseudoLabel}, sliceInts(x, "dmn.pseudo_label", k))
		cmp("instance_entropy", []float64{r.InstanceEntropy})
		cmp("p_txt", r.PText)

		feats, ents, counts := dmnDense(mem.Entries(), dc.MemorySize, d)
		cmp("mem_features", feats)
		cmp("mem_entropy", ents)
		fxt.CompareInts(t, what+" mem_count", counts, sliceInts(x, "dmn.mem_count", k))
		pi := cfg.DMN.PerImage[k]
		if want := parseDMNAction(t, pi.MemoryAction); r.Action != want {
			t.Errorf("%s: %+v, want %+v (%q)", what, r.Action, want, pi.MemoryAction)
		}
		t.Logf("%s: %v class %d slot %d (json: %q)", what, r.Action.Kind, r.Action.Class, r.Action.Slot, pi.MemoryAction)

		cmp("p_mem", r.PMem)
		// p_mem is nearly one-hot (the other classes near 1e-36 here, and
		// fp32 subnormals on other sets), so 1e-5 of its max says nothing
		// of the attention; log p_mem (the logit differences) does
		// (logProbErr).
		want, _ := slice(x, "dmn.p_mem", k)
		if err := logProbErr(r.PMem, want, 1e-5); err != nil {
			t.Errorf("%s log p_mem: %v", what, err)
		}
		cmp("final", r.Final)
		fxt.CompareInts(t, what+" pred", []int{r.Pred}, sliceInts(x, "dmn.pred", k))
		fxt.CompareInts(t, what+" json", []int{r.PseudoLabel, r.Pred}, []int{pi.PseudoLabel, pi.Pred})
	}
}

// Smallest positive fp32 numbers: the normal 2⁻¹²⁶ and the subnormal
// 2⁻¹⁴⁹ (the spacing of the subnormals).
var (
	minNormal32    = math.Ldexp(1, -126)
	minSubnormal32 = math.Ldexp(1, -149)
)

// logProbErr compares probabilities got (float64) with an fp32
// reference want through their logarithms: where want is a normal fp32
// number, |log got − log want| must be within tol of the largest such
// |log want| (the reference's logits rounded in fp32, scaled up by the
// exponent). Below that, fp32 holds want on the subnormal grid, whose
// absolute spacing 2⁻¹⁴⁹ makes its log meaningless (1e-42 keeps three
// significant bits): there got must be within the same log error of
// want, relatively, plus one spacing (and at most one spacing where want
// underflowed to 0).
func logProbErr(got, want []float64, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	var scale float64
	for _, w := range want {
		if w >= minNormal32 {
			scale = math.Max(scale, math.Abs(math.Log(w)))
		}
	}
	bound := tol * scale // on |Δ log p|
	var worst float64
	for i, w := range want {
		g := got[i]
		if !(g >= 0) || math.IsInf(g, 0) {
			return fmt.Errorf("value %d is %g", i, g)
		}
		if w >= minNormal32 {
			if g == 0 {
				return fmt.Errorf("value %d: 0, want %g", i, w)
			}
			d := math.Abs(math.Log(g) - math.Log(w))
			worst = math.Max(worst, d)
			if d > bound {
				return fmt.Errorf("value %d: log %.9g, want %.9g (|diff| %.3g > %.3g = %g of the largest |log|)", i, math.Log(g), math.Log(w), d, bound, tol)
			}
			continue
		}
		if lim := w*math.Expm1(bound) + minSubnormal32; math.Abs(g-w) > lim {
			return fmt.Errorf("value %d: %g, want %g below fp32's normal range (|diff| %.3g > %.3g)", i, g, w, math.Abs(g-w), lim)
		}
	}
	if scale == 0 && len(want) > 0 {
		return fmt.Errorf("no reference value in fp32's normal range")
	}
	return nil
}

// TestLogProbErr checks logProbErr on probabilities down to fp32's
// subnormals, as a reference stores them: the fp32 rounding of ours
// passes (a plain comparison of logs fails on it, 1e-42 has three
// significant bits), while a wrong value, normal or subnormal, fails.
func TestLogProbErr(t *testing.T) {
	logits := []float64{0, -20, -50, -80, -90, -95, -97.5, -99, -101.3, -103.2, -110}
	p := slices.Clone(logits)
	softmaxInPlace(p)
	ref := make([]float64, len(p))
	for i, v := range p {
		ref[i] = float64(float32(v))
	}
	if ref[len(ref)-2] == 0 || ref[len(ref)-2] >= minNormal32 || ref[len(ref)-1] != 0 {
		t.Fatalf("the case needs subnormal and underflowed references: %v", ref)
	}
	if err := logProbErr(p, ref, 1e-5); err != nil {
		t.Errorf("ours against its fp32 rounding: %v", err)
	}
	// What the test compared before: every log, relative to the largest.
	var worst, scale float64
	for i := range p {
		if ref[i] > 0 {
			worst = math.Max(worst, math.Abs(math.Log(p[i])-math.Log(ref[i])))
			scale = math.Max(scale, math.Abs(math.Log(ref[i])))
		}
	}
	if worst/scale <= 1e-5 {
		t.Errorf("logs of the subnormals agree to %.3g: the case does not show the problem", worst/scale)
	}
	for _, i := range []int{1, 3, len(p) - 3, len(p) - 2} {
		bad := slices.Clone(p)
		bad[i] *= 2
		if err := logProbErr(bad, ref, 1e-5); err == nil {
			t.Errorf("value %d doubled (%g): accepted", i, bad[i])
		}
	}
	bad := slices.Clone(p)
	bad[len(p)-1] = 1e-40
	if err := logProbErr(bad, ref, 1e-5); err == nil {
		t.Errorf("1e-40 where the reference underflowed: accepted")
	}
}

// dmnDense lays the memory out as the fixtures store it: features
// [C, capacity, d] and entropies [C, capacity] with zeros in empty slots,
// and the count per class.
func dmnDense(entries [][]DMNEntry, capacity, d int) (feats, ents []float64, counts []int) {
	feats = make([]float64, len(entries)*capacity*d)
	ents = make([]float64, len(entries)*capacity)
	for y, list := range entries {
		counts = append(counts, len(list))
		for s, e := range list {
			copy(feats[(y*capacity+s)*d:], e.Feature)
			ents[y*capacity+s] = e.Entropy
		}
	}
	return feats, ents, counts
}

// parseDMNAction reads tta2.json's memory_action.
func parseDMNAction(t *testing.T, s string) DMNAction {
	t.Helper()
	var a DMNAction
	var err error
	switch {
	case strings.HasPrefix(s, "append"):
		a.Kind = DMNAppend
		_, err = fmt.Sscanf(s, "append to class %d slot %d", &a.Class, &a.Slot)
	case strings.HasPrefix(s, "replace"):
		a.Kind = DMNReplace
		_, err = fmt.Sscanf(s, "replace class %d slot %d", &a.Class, &a.Slot)
	case strings.HasPrefix(s, "skip"):
		a.Kind, a.Slot = DMNSkip, -1
		_, err = fmt.Sscanf(s, "skip (class %d", &a.Class)
	default:
		t.Fatalf("unknown memory_action %q", s)
	}
	if err != nil {
		t.Fatalf("memory_action %q: %v", s, err)
	}
	return a
}

// TestDMNInsert walks one class of capacity 2 through the replacement rule.
func TestDMNInsert(t *testing.T) {
	steps := []struct {
		entropy float64
		want    DMNAction
		after   []float64 // the class's entropies by slot
	}{
		{0.5, DMNAction{DMNAppend, 1, 0}, []float64{0.5}},
		{0.7, DMNAction{DMNAppend, 1, 1}, []float64{0.5, 0.7}},
		{0.6, DMNAction{DMNReplace, 1, 1}, []float64{0.5, 0.6}},         // lower than one: the highest goes
		{0.6, DMNAction{DMNSkip, 1, -1}, []float64{0.5, 0.6}},           // equal to the highest: strict <
		{0.9, DMNAction{DMNSkip, 1, -1}, []float64{0.5, 0.6}},           // higher than all
		{0.1, DMNAction{DMNReplace, 1, 1}, []float64{0.5, 0.1}},         // lower than all: still the highest
		{0.05, DMNAction{DMNReplace, 1, 0}, []float64{0.05, 0.1}},       //
		{math.NaN(), DMNAction{DMNSkip, 1, -1}, []float64{0.05, 0.1}},   // NaN compares false
		{0.01, DMNAction{DMNReplace, 1, 1}, []float64{0.05, 0.01}},      //
		{0.01, DMNAction{DMNReplace, 1, 0}, []float64{0.01, 0.01}},      // 0.01 < 0.05
		{0.001, DMNAction{DMNReplace, 1, 1}, []float64{0.01, 0.001}},    // equal highest: the last slot
		{0.01, DMNAction{DMNSkip, 1, -1}, []float64{0.01, 0.001}},       //
		{0.0001, DMNAction{DMNReplace, 1, 0}, []float64{0.0001, 0.001}}, //
		{0.00001, DMNAction{DMNReplace, 1, 1}, []float64{0.0001, 0.00001}},
	}
	mem, err := NewDMNMemory(mat.NewDense(3, 2, []float64{1, 0, 0, 1, 1, 0}), DMNConfig{Capacity: 2, Beta: 5.5, SelectionP: 0.5, Weight: 1, Scale: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		got, err := mem.Insert([]float64{float64(i), 1}, 1, s.entropy)
		if err != nil {
			t.Fatal(err)
		}
		var after []float64
		for _, e := range mem.Entries()[1] {
			after = append(after, e.Entropy)
		}
		if got != s.want || !slices.Equal(after, s.after) {
			t.Errorf("step %d (H %v): %+v, entropies %v; want %+v, %v", i, s.entropy, got, after, s.want, s.after)
		}
	}
	for _, bad := range []struct {
		f     []float64
		label int
	}{{[]float64{1, 0}, 3}, {[]float64{1, 0}, -1}, {[]float64{1}, 0}} {
		if _, err := mem.Insert(bad.f, bad.label, 0.1); err == nil {
			t.Errorf("Insert(%v, %d): no error", bad.f, bad.label)
		}
	}
}

// TestDMNPredict checks the memory attention on a hand-made memory: with
// an empty memory the prototypes are the text embeddings; an entry equal
// to f gets weight exp(0) = 1 beside its text key's exp(−β(1 − ⟨f, T_c⟩)).
func TestDMNPredict(t *testing.T) {
	head := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	mem, err := NewDMNMemory(head, DMNConfig{Capacity: 1, Beta: 2, SelectionP: 0.5, Weight: 1, Scale: 10})
	if err != nil {
		t.Fatal(err)
	}
	f := []float64{0.6, 0.8}
	softmax2 := func(a, b float64) []float64 {
		m := math.Max(a, b)
		ea, eb := math.Exp(a-m), math.Exp(b-m)
		return []float64{ea / (ea + eb), eb / (ea + eb)}
	}
	got, _ := mem.Predict(f)
	want := softmax2(10*0.6, 10*0.8)
	if math.Abs(got[0]-want[0]) > 1e-15 {
		t.Fatalf("empty memory: %v, want %v", got, want)
	}
	if _, err := mem.Insert(f, 0, 0.3); err != nil {
		t.Fatal(err)
	}
	a := math.Exp(-2 * (1 - 0.6)) // text key of class 0
	q := []float64{a + 0.6, 0.8}  // a·T_0 + 1·f
	n := math.Hypot(q[0], q[1])
	want = softmax2(10*(q[0]*0.6+q[1]*0.8)/n, 10*0.8)
	got, _ = mem.Predict(f)
	if math.Abs(got[0]-want[0]) > 1e-15 {
		t.Errorf("one entry: %v, want %v", got, want)
	}
	if _, err := mem.Predict([]float64{1}); err == nil {
		t.Error("Predict of a short feature: no error")
	}
}

// TestDMNEntriesRoundTrip: a memory restored from Entries continues
// bit-identically, and SetEntries rejects what does not fit.
func TestDMNEntriesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 29))
	const c, d, v = 4, 6, 8
	head, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	cfg := DMNConfig{Capacity: 2, Beta: 5.5, SelectionP: 0.25, Weight: 1, Scale: 10}
	a, _ := NewDMNMemory(head, cfg)
	for range 10 {
		if _, err := a.Step(fxt.RandDense(rng, v, d, 1)); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := NewDMNMemory(head, cfg)
	if err := b.SetEntries(a.Entries()); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		f := fxt.RandDense(rng, v, d, 1)
		ra, _ := a.Step(f)
		rb, _ := b.Step(f)
		if !slices.Equal(ra.Final, rb.Final) || ra.Action != rb.Action {
			t.Fatalf("image %d after the round trip: %v %+v, want %v %+v", i, rb.Final, rb.Action, ra.Final, ra.Action)
		}
	}
	full := a.Entries()
	bad := []struct {
		name string
		mod  func([][]DMNEntry) [][]DMNEntry
	}{
		{"too few classes", func(e [][]DMNEntry) [][]DMNEntry { return e[:c-1] }},
		{"over capacity", func(e [][]DMNEntry) [][]DMNEntry {
			e[0] = append(e[0], DMNEntry{make([]float64, d), 0}, DMNEntry{make([]float64, d), 0}, DMNEntry{make([]float64, d), 0})
			return e
		}},
		{"wrong width", func(e [][]DMNEntry) [][]DMNEntry { e[1] = []DMNEntry{{make([]float64, d+1), 0}}; return e }},
		{"NaN entropy", func(e [][]DMNEntry) [][]DMNEntry { e[2] = []DMNEntry{{make([]float64, d), math.NaN()}}; return e }},
		{"Inf feature", func(e [][]DMNEntry) [][]DMNEntry {
			f := make([]float64, d)
			f[0] = math.Inf(1)
			e[3] = []DMNEntry{{f, 0}}
			return e
		}},
	}
	for _, tc := range bad {
		if err := b.SetEntries(tc.mod(a.Entries())); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if got := b.Entries(); fmt.Sprint(got) != fmt.Sprint(a.Entries()) || fmt.Sprint(full) != fmt.Sprint(a.Entries()) {
		t.Error("a rejected SetEntries changed the memory, or Entries aliases it")
	}
}

// TestDMNConfig rejects configurations the code cannot run.
func TestDMNConfig(t *testing.T) {
	head := mat.NewDense(2, 2, []float64{1, 0, 0, 1})
	if _, err := NewDMNMemory(head, DefaultDMNConfig()); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, mod := range []func(*DMNConfig){
		func(c *DMNConfig) { c.Capacity = 0 },
		func(c *DMNConfig) { c.Beta = math.NaN() },
		func(c *DMNConfig) { c.SelectionP = 0 },
		func(c *DMNConfig) { c.Weight = -1 },
		func(c *DMNConfig) { c.Scale = 0 },
	} {
		cfg := DefaultDMNConfig()
		mod(&cfg)
		if _, err := NewDMNMemory(head, cfg); err == nil {
			t.Errorf("config %+v: no error", cfg)
		}
	}
	mem, _ := NewDMNMemory(head, DefaultDMNConfig())
	if _, err := mem.Step(mat.NewDense(4, 2, []float64{1, 0, 0, 1, 1, 1, 1, 0})); err == nil {
		t.Error("4 views at selection 0.1: no error")
	}
}
