package feature

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// rottaItemJSON is one memory item as tta2.json lists it: the stream image
// (or, in the synthetic run, the insert) it came from.
type rottaItemJSON struct {
	Image       int     `json:"image"`
	Item        int     `json:"item"`
	Class       int     `json:"class"`
	Uncertainty float64 `json:"uncertainty"`
	Age         int     `json:"age"`
}

// rottaJSON is tta2.json's RoTTA block.
type rottaJSON struct {
	RoTTA struct {
		Config struct {
			Images          []int   `json:"images"`
			BatchSize       int     `json:"batch_size"`
			MemorySize      int     `json:"memory_size"`
			UpdateFrequency int     `json:"update_frequency"`
			LambdaT         float64 `json:"lambda_t"`
			LambdaU         float64 `json:"lambda_u"`
		} `json:"config"`
		Inserts []struct {
			Image       int             `json:"image"`
			Class       int             `json:"class"`
			Uncertainty float64         `json:"uncertainty"`
			MemoryAfter []rottaItemJSON `json:"memory_after"`
		} `json:"inserts"`
		Updates []struct {
			Update              int `json:"update"`
			AfterStreamPosition int `json:"after_stream_position"`
		} `json:"updates"`
		Synthetic struct {
			Capacity int `json:"capacity"`
			NumClass int `json:"num_class"`
			Steps    []struct {
				MemoryAfter []rottaItemJSON `json:"memory_after"`
			} `json:"steps"`
		} `json:"synthetic_memory"`
	} `json:"rotta"`
}

func readRoTTAJSON(t *testing.T) rottaJSON {
	t.Helper()
	var js rottaJSON
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	if js.RoTTA.Config.BatchSize < 1 || js.RoTTA.Config.MemorySize < 1 || js.RoTTA.Config.UpdateFrequency < 1 {
		t.Fatalf("tta2.json: rotta config %+v incomplete", js.RoTTA.Config)
	}
	return js
}

// rottaTol: the fixture is fp32 torch and this port float64; entropies,
// losses, weights and probabilities are held to the README's 1e-5
// relative (to each tensor's max).
const rottaTol = 1e-5

// TestRoTTAStreamFixture replays tta2's RoTTA stream at the level of the
// teacher's logits: pseudo-labels (exact; they are the predictions,
// rotta.pred) and uncertainties from every
// batch's logits, the memory after every insert (which images, classes
// and ages exactly; uncertainties to rottaTol), and at every update the
// memory batch in get_memory order, its ages/capacity and timeliness
// weights.
func TestRoTTAStreamFixture(t *testing.T) {
	js := readRoTTAJSON(t)
	cfg := js.RoTTA.Config
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	batches := x.Batches("rotta.b", "teacher_logits")
	var mem *RoTTAMemory[int]
	var preds []int
	pos, update := 0, 0
	for b := range batches {
		p := fmt.Sprintf("rotta.b%d.", b)
		logits := x.Dense(p + "teacher_logits")
		rows, classes := logits.Dims()
		if mem == nil {
			var err error
			mem, err = NewRoTTAMemory[int](RoTTAMemoryConfig{Capacity: cfg.MemorySize, Classes: classes, LambdaT: cfg.LambdaT, LambdaU: cfg.LambdaU})
			if err != nil {
				t.Fatal(err)
			}
		}
		labels, unc := RoTTAPseudoLabels(logits)
		preds = append(preds, labels...)
		fxt.CompareInts(t, p+"pseudo_label", labels, x.Ints(p+"pseudo_label"))
		fxt.Compare(t, p+"uncertainty", unc, x.Vec(p+"uncertainty"), rottaTol, fxt.Rel)
		for i := range rows {
			if pos >= len(js.RoTTA.Inserts) {
				t.Fatalf("tta2.json: %d inserts, the stream has more", len(js.RoTTA.Inserts))
			}
			ins := js.RoTTA.Inserts[pos]
			image := cfg.Images[pos]
			if ins.Image != image || ins.Class != labels[i] {
				t.Fatalf("insert %d: json has image %d class %d, stream image %d pseudo-label %d", pos, ins.Image, ins.Class, image, labels[i])
			}
			if _, err := mem.Add(image, labels[i], unc[i]); err != nil {
				t.Fatal(err)
			}
			pos++
			var gotIDs, wantIDs []int
			var gotU, wantU []float64
			for _, it := range mem.Items() {
				gotIDs = append(gotIDs, it.Data, it.Class, it.Age)
				gotU = append(gotU, it.Uncertainty)
			}
			for _, it := range ins.MemoryAfter {
				wantIDs = append(wantIDs, it.Image, it.Class, it.Age)
				wantU = append(wantU, it.Uncertainty)
			}
			what := fmt.Sprintf("memory after insert %d (image, class, age)", pos-1)
			fxt.CompareInts(t, what, gotIDs, wantIDs)
			if len(gotU) == len(wantU) {
				fxt.Compare(t, fmt.Sprintf("memory after insert %d uncertainties", pos-1), gotU, wantU, rottaTol, fxt.Rel)
			}
			if pos%cfg.UpdateFrequency != 0 {
				continue
			}
			if update >= len(js.RoTTA.Updates) || js.RoTTA.Updates[update].AfterStreamPosition != pos {
				t.Fatalf("an update after stream position %d is not in tta2.json", pos)
			}
			u := fmt.Sprintf("rotta.u%d.", update)
			var images []int
			for _, it := range mem.Items() {
				images = append(images, it.Data)
			}
			fxt.CompareInts(t, u+"memory_images", images, x.Ints(u+"memory_images"))
			ages := mem.Ages()
			fxt.Compare(t, u+"ages", ages, x.Vec(u+"ages"), rottaTol, fxt.Rel)
			fxt.Compare(t, u+"instance_weight", TimelinessWeights(ages), x.Vec(u+"instance_weight"), rottaTol, fxt.Rel)
			update++
		}
	}
	fxt.CompareInts(t, "rotta.pred", preds, x.Ints("rotta.pred"))
	if pos != len(js.RoTTA.Inserts) || update != len(js.RoTTA.Updates) {
		t.Errorf("replayed %d inserts and %d updates; tta2.json has %d and %d", pos, update, len(js.RoTTA.Inserts), len(js.RoTTA.Updates))
	}
}

// TestRoTTASyntheticMemory replays rotta.synthetic: (class, uncertainty)
// inserts into the official CSTU of tta2.json's capacity and classes,
// which exercise in-class replacement, rejection and eviction from the
// majority classes; the memory after each insert is compared exactly
// (insert index, class, age, in class-major order).
func TestRoTTASyntheticMemory(t *testing.T) {
	js := readRoTTAJSON(t)
	syn := js.RoTTA.Synthetic
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	ins := x.Dense("rotta.synthetic.inserts")
	after, shape, err := x.Int64("rotta.synthetic.memory_after")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := ins.Dims()
	if len(shape) != 3 || shape[0] != n || shape[2] != 3 || len(syn.Steps) != n {
		t.Fatalf("rotta.synthetic: %d inserts, memory_after %v, %d json steps", n, shape, len(syn.Steps))
	}
	mem, err := NewRoTTAMemory[int](RoTTAMemoryConfig{Capacity: syn.Capacity, Classes: syn.NumClass, LambdaT: 1, LambdaU: 1})
	if err != nil {
		t.Fatal(err)
	}
	var rejected int
	for i := range n {
		kept, err := mem.Add(i, int(ins.At(i, 0)), ins.At(i, 1))
		if err != nil {
			t.Fatal(err)
		}
		if !kept {
			rejected++
		}
		var got, want []int
		for _, it := range mem.Items() {
			got = append(got, it.Data, it.Class, it.Age)
		}
		for r := range shape[1] {
			row := after[(i*shape[1]+r)*3 : (i*shape[1]+r+1)*3]
			if row[0] < 0 {
				break
			}
			want = append(want, int(row[0]), int(row[1]), int(row[2]))
		}
		fxt.CompareInts(t, fmt.Sprintf("synthetic memory after insert %d", i), got, want)
		var wantU []float64
		for _, it := range syn.Steps[i].MemoryAfter {
			wantU = append(wantU, it.Uncertainty)
		}
		var gotU []float64
		for _, it := range mem.Items() {
			gotU = append(gotU, it.Uncertainty)
		}
		if !slices.Equal(gotU, wantU) {
			t.Errorf("synthetic insert %d: uncertainties %v, want %v", i, gotU, wantU)
		}
	}
	t.Logf("%d of %d synthetic inserts rejected", rejected, n)
}

// TestRoTTAMemoryRules checks the insertion rules by hand on a memory of
// capacity 4 over 2 classes (quota 2), λ_t = λ_u = 1, so that the score
// is σ(age/4) + u/log 2.
func TestRoTTAMemoryRules(t *testing.T) {
	mem, err := NewRoTTAMemory[string](RoTTAMemoryConfig{Capacity: 4, Classes: 2, LambdaT: 1, LambdaU: 1})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		data  string
		class int
		u     float64
		kept  bool
		want  string // the memory afterwards: data:age, class-major
	}{
		{"a", 0, 0.5, true, "a:1"},
		{"b", 0, 0.1, true, "a:2 b:1"},
		// Class 0 at quota: its highest score, a's σ(2/4) + 0.5/log 2 ≈
		// 1.344, does not exceed the new σ(0) + 0.6/log 2 ≈ 1.366: rejected.
		{"c", 0, 0.6, false, "a:3 b:2"},
		// a now scores σ(3/4) + 0.721 ≈ 1.401 > 0.5 + 0.1/log 2 ≈ 0.644.
		{"d", 0, 0.1, true, "b:3 d:1"},
		{"e", 1, 0.9, true, "b:4 d:2 e:1"},
		{"f", 1, 0.9, true, "b:5 d:3 e:2 f:1"},
		// Full and class 1 at quota: e, older than f with the same
		// uncertainty, scores higher and leaves.
		{"g", 1, 0.2, true, "b:6 d:4 f:2 g:1"},
	}
	for i, s := range steps {
		kept, err := mem.Add(s.data, s.class, s.u)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range mem.Items() {
			got = append(got, fmt.Sprintf("%s:%d", it.Data, it.Age))
		}
		if g := fmt.Sprint(got); kept != s.kept || g != "["+s.want+"]" {
			t.Errorf("step %d (%s): kept %v, memory %s; want %v, [%s]", i, s.data, kept, g, s.kept, s.want)
		}
	}
	// A class below its quota takes from the majority when the memory is
	// full: capacity 3 over 2 classes (quota 1.5), class 0 holds 2.
	m2, err := NewRoTTAMemory[string](RoTTAMemoryConfig{Capacity: 3, Classes: 2, LambdaT: 1, LambdaU: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		d string
		y int
		u float64
	}{{"a", 0, 0.3}, {"b", 0, 0.2}, {"c", 1, 0.1}, {"d", 1, 0}} {
		if _, err := m2.Add(s.d, s.y, s.u); err != nil {
			t.Fatal(err)
		}
	}
	// d: class 1 holds 1 < 1.5, memory full; majority class 0; a scores
	// highest (oldest, most uncertain) and leaves.
	var got []string
	for _, it := range m2.Items() {
		got = append(got, it.Data)
	}
	if !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("majority eviction: memory %v, want [b c d]", got)
	}
	if _, err := m2.Add("x", 2, 0); err == nil {
		t.Error("class out of range accepted")
	}
	if _, err := m2.Add("x", 0, math.NaN()); err == nil {
		t.Error("NaN uncertainty accepted")
	}
	m2.Reset()
	if m2.Len() != 0 {
		t.Errorf("Reset left %d items", m2.Len())
	}
	// Equal scores (λ_t = 0): the last of them leaves, as the code's ≥.
	m3, err := NewRoTTAMemory[string](RoTTAMemoryConfig{Capacity: 4, Classes: 2, LambdaT: 0, LambdaU: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "b"} {
		if _, err := m3.Add(d, 0, 0.5); err != nil {
			t.Fatal(err)
		}
	}
	if kept, err := m3.Add("c", 0, 0.1); err != nil || !kept {
		t.Fatalf("tie: kept %v, %v", kept, err)
	}
	got = got[:0]
	for _, it := range m3.Items() {
		got = append(got, it.Data)
	}
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("equal scores: memory %v, want [a c] (the last of the tied leaves)", got)
	}
}

// TestRoTTAMemoryState round-trips the memory through Items/SetItems and
// checks that states that do not fit are refused unchanged.
func TestRoTTAMemoryState(t *testing.T) {
	cfg := RoTTAMemoryConfig{Capacity: 6, Classes: 3, LambdaT: 1, LambdaU: 1}
	a, err := NewRoTTAMemory[int](cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	add := func(m *RoTTAMemory[int], i int, y int, u float64) {
		if _, err := m.Add(i, y, u); err != nil {
			t.Fatal(err)
		}
	}
	type ins struct {
		y int
		u float64
	}
	var stream []ins
	for range 40 {
		stream = append(stream, ins{rng.IntN(3), 2 * rng.Float64()})
	}
	for i, s := range stream[:20] {
		add(a, i, s.y, s.u)
	}
	b, err := NewRoTTAMemory[int](cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetItems(a.Items()); err != nil {
		t.Fatal(err)
	}
	for i, s := range stream[20:] {
		add(a, 20+i, s.y, s.u)
		add(b, 20+i, s.y, s.u)
		if fmt.Sprint(a.Items()) != fmt.Sprint(b.Items()) {
			t.Fatalf("insert %d after restoring: %v, want %v", 20+i, b.Items(), a.Items())
		}
	}
	good := fmt.Sprint(b.Items())
	for _, tc := range []struct {
		name  string
		items []RoTTAItem[int]
	}{
		{"over capacity", slices.Repeat([]RoTTAItem[int]{{Class: 0}}, 7)},
		{"over quota", slices.Repeat([]RoTTAItem[int]{{Class: 1, Age: 1}}, 3)},
		{"class out of range", []RoTTAItem[int]{{Class: 3}}},
		{"negative age", []RoTTAItem[int]{{Class: 0, Age: -1}}},
		{"NaN uncertainty", []RoTTAItem[int]{{Class: 0, Uncertainty: math.NaN()}}},
	} {
		if err := b.SetItems(tc.items); !errors.Is(err, ErrStateMismatch) {
			t.Errorf("%s: error %v, want ErrStateMismatch", tc.name, err)
		}
		if fmt.Sprint(b.Items()) != good {
			t.Errorf("%s: a refused state changed the memory", tc.name)
		}
	}
}

// TestSoftCrossEntropyFixture compares the loss of every tta2 RoTTA update
// from the stored student and teacher logits and ages: the per-item
// cross-entropies, the timeliness weights and the weighted mean.
func TestSoftCrossEntropyFixture(t *testing.T) {
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	for u := range x.Batches("rotta.u", "loss") {
		p := fmt.Sprintf("rotta.u%d.", u)
		w := TimelinessWeights(x.Vec(p + "ages"))
		res, err := SoftCrossEntropy(x.Dense(p+"student_logits"), x.Dense(p+"teacher_logits"), w)
		if err != nil {
			t.Fatal(err)
		}
		fxt.Compare(t, p+"instance_weight", w, x.Vec(p+"instance_weight"), rottaTol, fxt.Rel)
		fxt.Compare(t, p+"ce", res.CE, x.Vec(p+"ce"), rottaTol, fxt.Rel)
		fxt.Compare(t, p+"loss", []float64{res.Loss}, []float64{x.Scalar(p + "loss")}, rottaTol, fxt.Rel)
	}
}

// TestSoftCrossEntropyGradCheck checks ∂L/∂student of SoftCrossEntropy and
// ∂L/∂F of RoTTALoss against float64 central differences (h = 1e-6: the
// truncation error (h² times the third derivative) and the rounding error ε/h are both below 1e-9
// relative, so 1e-6 leaves room without hiding a wrong term).
func TestSoftCrossEntropyGradCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const b, c, d = 4, 5, 7
	student := fxt.RandDense(rng, b, c, 2)
	teacher := fxt.RandDense(rng, b, c, 2)
	weights := TimelinessWeights([]float64{0.1, 0.5, 1, 2})
	res, err := SoftCrossEntropy(student, teacher, weights)
	if err != nil {
		t.Fatal(err)
	}
	loss := func(s *mat.Dense) float64 {
		r, err := SoftCrossEntropy(s, teacher, weights)
		if err != nil {
			t.Fatal(err)
		}
		return r.Loss
	}
	fxt.GradCheck(t, "soft CE ∂L/∂student", student, loss, res.DLdS, 1e-6, 1e-6)

	f := fxt.RandDense(rng, b, d, 1)
	text, _ := NormalizeRows(fxt.RandDense(rng, c, d, 1))
	ages := []float64{0.05, 0.2, 0.4, 1}
	const scale = 10
	rr, err := RoTTALoss(f, text, teacher, scale, ages)
	if err != nil {
		t.Fatal(err)
	}
	lossF := func(f *mat.Dense) float64 {
		r, err := RoTTALoss(f, text, teacher, scale, ages)
		if err != nil {
			t.Fatal(err)
		}
		return r.Loss
	}
	fxt.GradCheck(t, "rotta ∂L/∂F", f, lossF, rr.DLdF, 1e-6, 1e-6)
	// With equal teacher and student distributions the gradient vanishes
	// and the loss is the weighted mean entropy.
	same, err := SoftCrossEntropy(teacher, teacher, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := mat.Norm(same.DLdS, math.Inf(1)); m > 1e-15 {
		t.Errorf("student = teacher: gradient max %g, want 0", m)
	}
}

// TestSoftCrossEntropyRejects checks the shape errors.
func TestSoftCrossEntropyRejects(t *testing.T) {
	s := mat.NewDense(2, 3, nil)
	if _, err := SoftCrossEntropy(s, mat.NewDense(2, 2, nil), nil); err == nil {
		t.Error("mismatched teacher accepted")
	}
	if _, err := SoftCrossEntropy(s, s, []float64{1}); err == nil {
		t.Error("one weight for two rows accepted")
	}
	if _, err := RoTTALoss(mat.NewDense(2, 3, nil), mat.NewDense(4, 3, nil), mat.NewDense(2, 4, nil), 1, []float64{0}); err == nil {
		t.Error("one age for two items accepted")
	}
}

// TestEMAUpdateFixture checks the teacher after each tta2 RoTTA update:
// EMAUpdate of the previous teacher (the initial parameters before the
// first update) with the student after the Adam step, keep = 1 − ν from
// tta2.json. Tolerance: the README's 1e-6 absolute on parameters after a
// step (the fixture rounds each parameter to fp32, |θ| ≲ 2).
func TestEMAUpdateFixture(t *testing.T) {
	var js struct {
		RoTTA struct {
			Config struct {
				Nu float64 `json:"nu"`
			} `json:"config"`
		} `json:"rotta"`
	}
	fixturefile.ReadJSON(t, "fixtures/tta2.json", &js)
	if !(js.RoTTA.Config.Nu > 0) {
		t.Fatalf("tta2.json: rotta nu %v", js.RoTTA.Config.Nu)
	}
	x := fxt.Open(t, "fixtures/tta2.safetensors")
	for _, name := range x.ParamNames() {
		teacher := x.Vec("init.param." + name)
		for u := range x.Batches("rotta.u", "loss") {
			p := fmt.Sprintf("rotta.u%d.", u)
			if err := EMAUpdate(teacher, x.Vec(p+"student."+name), 1-js.RoTTA.Config.Nu); err != nil {
				t.Fatal(err)
			}
			fxt.Compare(t, p+"teacher."+name, teacher, x.Vec(p+"teacher."+name), 1e-6, fxt.Abs)
		}
	}
	f32 := []float32{1, 2}
	if err := EMAUpdate(f32, []float32{3, 4}, 0.5); err != nil || f32[0] != 2 || f32[1] != 3 {
		t.Errorf("float32 EMA: %v, %v; want [2 3]", f32, err)
	}
	if err := EMAUpdate(f32, []float32{1}, 0.5); err == nil {
		t.Error("mismatched lengths accepted")
	}
	if err := EMAUpdate(f32, f32, 1.5); err == nil {
		t.Error("weight 1.5 accepted")
	}
}
