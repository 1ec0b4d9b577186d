package feature

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/internal/fixturefile"
	"github.com/subtta/subtta/tta/internal/fxt"
	"gonum.org/v1/gonum/mat"
)

// The reference's order at ties is that of torch's top-k on the machine it
// ran on; ECALPGraph's is the lower index first. The fixture tests compare
// the neighbour lists as sets within groups of equal similarity (equal to
// the fixtures' tolerance, since a near-duplicate image differs by an ulp
// in fp32), allowing a different choice where such a group straddles the
// list's cut, and then put the reference's lists into the graph (alignECALP)
// so that W̃, the labels and the prediction are compared under the
// reference's own order. They run the graph in three orders at ties:
// ECALPGraph's, torch's CPU order (torchtopk_test.go) and the reverse of
// ECALPGraph's (the higher index first).

// ecalpOrder is a rule for the order of a list's candidates at ties.
type ecalpOrder struct {
	name string
	topk func(q []rankItem, k int) []rankItem
}

var ecalpOrders = []ecalpOrder{
	{"index", indexTopK},
	{"torch-cpu", torchTopK},
	{"reverse-index", reverseTopK},
}

// reverseTopK is indexTopK with the higher index first at ties.
func reverseTopK(q []rankItem, k int) []rankItem {
	for i := range q {
		q[i].idx = -q[i].idx
	}
	top := indexTopK(q, k)
	for i := range q {
		q[i].idx = -q[i].idx
	}
	return top
}

// ecalpLayout writes one step's lists in the fixture's layout: text rows
// −1 / 0, image rows the image neighbours (node index offset by C) and
// then the classes.
func ecalpLayout(c int, images, texts []ECALPNeighbours) ([]int, *mat.Dense) {
	width := len(images[0].Index) + len(texts[0].Index)
	idx := slices.Repeat([]int{-1}, c*width)
	sim := mat.NewDense(c+len(images), width, nil)
	for r := range images {
		for j, q := range images[r].Index {
			idx = append(idx, c+q)
			sim.Set(c+r, j, images[r].Sim[j])
		}
		for j, k := range texts[r].Index {
			idx = append(idx, k)
			sim.Set(c+r, len(images[r].Index)+j, texts[r].Sim[j])
		}
	}
	return idx, sim
}

// tieMatch compares our list with the reference's, both best first: the
// similarities position by position within tol; the indices as sets,
// except within the group of similarities equal (within 2·tol) to the
// last one kept, where a tie at the cut lets the two keep different
// members; and each of the reference's entries must be a similarity the
// features give that pair (plausible). It returns what does not hold.
func tieMatch(ourIdx []int, ourSim []float64, refIdx []int, refSim []float64, tol float64, plausible func(q int, s float64) bool) error {
	if len(ourIdx) != len(refIdx) {
		return fmt.Errorf("%d neighbours, reference %d", len(ourIdx), len(refIdx))
	}
	if len(refIdx) == 0 {
		return nil
	}
	for j := range refSim {
		if math.Abs(ourSim[j]-refSim[j]) > tol {
			return fmt.Errorf("similarity %d: %.9g, reference %.9g (|diff| > %.3g)", j, ourSim[j], refSim[j], tol)
		}
	}
	cut := refSim[len(refSim)-1]
	above := func(idx []int, sim []float64) []int {
		var out []int
		for j, q := range idx {
			if math.Abs(sim[j]-cut) > 2*tol {
				out = append(out, q)
			}
		}
		slices.Sort(out)
		return out
	}
	if a, b := above(ourIdx, ourSim), above(refIdx, refSim); !slices.Equal(a, b) {
		return fmt.Errorf("neighbours above the cut %v, reference %v (lists %v, reference %v)", a, b, ourIdx, refIdx)
	}
	for j, q := range refIdx {
		if !plausible(q, refSim[j]) {
			return fmt.Errorf("reference neighbour %d has similarity %.9g, which the features do not give", q, refSim[j])
		}
	}
	return nil
}

// ecalpPlausible returns the checks tieMatch needs for image row r of g:
// the similarity of an image pair is ⟨w⊙f_r, f_q⟩ or ⟨w⊙f_q, f_r⟩ (the
// weight sits on the older node's side), or −1 for an edge the code
// invalidated; of a class, ⟨f_r, T_k⟩.
func ecalpPlausible(g *ECALPGraph, r int, tol float64) (image, class func(q int, s float64) bool) {
	wr, ur := g.node(r)
	image = func(q int, s float64) bool {
		if q < 0 || q > len(g.feat) {
			return false
		}
		wq, uq := g.node(q)
		return s == -1 || math.Abs(dot(wr, uq)-s) <= tol || math.Abs(dot(wq, ur)-s) <= tol
	}
	c, _ := g.text.Dims()
	f := g.feat[min(r, len(g.feat)-1)]
	class = func(k int, s float64) bool {
		return k >= 0 && k < c && math.Abs(dot(f, g.text.RawRowView(k))-s) <= tol
	}
	return image, class
}

// alignECALP puts the reference's choice at ties into g's lists for image
// row r (after tieMatch accepted them): the lists used become the
// reference's, with our similarities; the stored candidates start with
// them and keep the rest of ours, as many as before. It reports whether
// the row's lists changed as sets.
func alignECALP(g *ECALPGraph, r int, refImg, refTxt []int) bool {
	changed := false
	setOf := func(a []int) []int { b := slices.Clone(a); slices.Sort(b); return b }
	used := g.used[r]
	if !slices.Equal(setOf(used.Index), setOf(refImg)) {
		changed = true
	}
	if !slices.Equal(setOf(g.texts[r].Index), setOf(refTxt)) {
		changed = true
	}
	newUsed := ECALPNeighbours{Index: slices.Clone(refImg), Sim: slices.Clone(used.Sim)}
	stored := g.images[r]
	next := newUsed.clone()
	for j, q := range stored.Index {
		if !slices.Contains(refImg, q) && len(next.Index) < len(stored.Index) {
			next.Index, next.Sim = append(next.Index, q), append(next.Sim, stored.Sim[j])
		}
	}
	g.images[r] = next
	if r < len(g.images)-2 {
		// An old row uses its stored list's first k.
		g.used[r] = ECALPNeighbours{Index: next.Index[:len(refImg)], Sim: next.Sim[:len(refImg)]}
	} else {
		g.used[r] = newUsed
	}
	g.texts[r] = ECALPNeighbours{Index: slices.Clone(refTxt), Sim: slices.Clone(g.texts[r].Sim)}
	return changed
}

// ecalpFixtureRun replays tta2's ECALP stream from SUBTTA_SHARED with the
// graph's order at ties set to order, and compares at every step the
// neighbour lists (tieMatch), then, with the reference's lists put into the
// graph, W̃, the prior, every propagation iterate, the next prior and the
// prediction; that the rows whose lists differ from a from-scratch top-k
// are those tta2.json names (a row whose lists differ only by a tie at the
// cut may be named or not); and the predictions and output probabilities
// of the whole stream. It returns the number of rows whose lists it
// aligned to the reference's (changed as sets).
func ecalpFixtureRun(t *testing.T, order ecalpOrder) (aligned int) {
	t.Helper()
	x, js, cfg, feats, text := ecalpFixture(t)
	g, err := NewECALPGraph(text, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.topk = order.topk
	fxt.Compare(t, "ecalp.w", g.w, x.Vec("ecalp.w"), ecalpTol, fxt.Rel)
	steps, _ := feats.Dims()
	if len(js.ECALP.PerStep) != steps {
		t.Fatalf("tta2.json: %d steps for %d features", len(js.ECALP.PerStep), steps)
	}
	c, _ := text.Dims()
	var preds []int
	var probs []float64
	for i := range steps {
		p := fmt.Sprintf("ecalp.s%d.", i)
		g.addFeature(feats.RawRowView(i))
		g.expand()
		knn := x.Ints(p + "knn")
		simWant := x.Dense(p + "sim")
		rows, width := simWant.Dims()
		n := len(g.used)
		if rows != c+n || len(knn) != rows*width {
			t.Fatalf("%sknn: %d rows, the graph has %d nodes", p, rows, c+n)
		}
		// The fixtures' 1e-5 relative to the tensor's max, as an absolute
		// bound on every similarity.
		tol := ecalpTol * maxAbs(simWant.RawMatrix().Data)
		kIm := len(g.used[0].Index)
		if kIm+len(g.texts[0].Index) != width {
			t.Fatalf("%sknn: width %d, our lists %d+%d", p, width, kIm, len(g.texts[0].Index))
		}
		for r := range n {
			row := knn[(c+r)*width : (c+r+1)*width]
			refImg := make([]int, kIm)
			for j := range kIm {
				refImg[j] = row[j] - c
			}
			refTxt := slices.Clone(row[kIm:])
			refSim := simWant.RawRowView(c + r)
			image, class := ecalpPlausible(g, r, tol)
			if err := tieMatch(g.used[r].Index, g.used[r].Sim, refImg, refSim[:kIm], tol, image); err != nil {
				t.Errorf("%s order: step %d row %d image neighbours: %v", order.name, i, r, err)
			}
			if err := tieMatch(g.texts[r].Index, g.texts[r].Sim, refTxt, refSim[kIm:], tol, class); err != nil {
				t.Errorf("%s order: step %d row %d class neighbours: %v", order.name, i, r, err)
			}
			if alignECALP(g, r, refImg, refTxt) {
				aligned++
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		var tr ecalpTrace
		res := g.propagate(c, &tr)
		gotIdx, gotSim := ecalpLayout(c, tr.images, tr.texts)
		fxt.CompareInts(t, p+"knn (aligned)", gotIdx, knn)
		fxt.CompareDense(t, p+"sim", gotSim, simWant, ecalpTol, fxt.Rel)
		fxt.CompareDense(t, p+"W_tilde", tr.wTilde, x.Dense(p+"W_tilde"), ecalpTol, fxt.Rel)
		fxt.CompareDense(t, p+"prior_in", tr.priorIn, x.Dense(p+"prior_in"), ecalpTol, fxt.Rel)
		for it, y := range tr.iterates {
			name := fmt.Sprintf("%sY_iter%d", p, it+1)
			fxt.CompareDense(t, name, y, x.Dense(name), ecalpTol, fxt.Rel)
		}
		fxt.CompareDense(t, p+"prior_out", tr.priorOut, x.Dense(p+"prior_out"), ecalpTol, fxt.Rel)
		preds = append(preds, res.Pred)
		prob := slices.Clone(res.Scores)
		scale(prob, 10000)
		softmaxInPlace(prob)
		probs = append(probs, prob...)
		checkRowsDiffering(t, fmt.Sprintf("%s order: step %d", order.name, i), g, tr.images, js.ECALP.PerStep[i].RowsDiffering, tol)
	}
	fxt.CompareInts(t, "ecalp.pred", preds, x.Ints("ecalp.pred"))
	// The code's output softmax(10000·y): probabilities, held to 1e-5
	// relative to the max like every probability, although the factor 10⁴
	// amplifies fp32's rounding of y.
	fxt.Compare(t, "ecalp.pred_prob", probs, x.Vec("ecalp.pred_prob"), ecalpTol, fxt.Rel)
	return aligned
}

func maxAbs(v []float64) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

// scratchSims are image row r's similarities to every image node as a
// from-scratch search computes them (w on r's side).
func scratchSims(g *ECALPGraph, r, n int) []float64 {
	wr, _ := g.node(r)
	sims := make([]float64, n)
	for q := range sims {
		_, uq := g.node(q)
		sims[q] = dot(wr, uq)
	}
	return sims
}

// checkRowsDiffering compares the rows whose lists differ, as sets, from a
// from-scratch top-k with w on the query side with the reference's list
// want. A row whose set is not the one the graph's order selects but is
// one of the k largest all the same (a tie at the cut, within tol) may be
// listed or not: the reference's order at ties decides it.
func checkRowsDiffering(t *testing.T, what string, g *ECALPGraph, lists []ECALPNeighbours, want []int, tol float64) {
	t.Helper()
	for r, l := range lists {
		sims := scratchSims(g, r, len(lists))
		a, b := slices.Clone(g.topK(sims, nil, len(l.Index)).Index), slices.Clone(l.Index)
		slices.Sort(a)
		slices.Sort(b)
		differs := !slices.Equal(a, b)
		listed := slices.Contains(want, r)
		if differs == listed {
			continue
		}
		// A tie at the cut: every member at least as similar as every
		// non-member, within tol.
		lo, hi := math.Inf(1), math.Inf(-1)
		for q, s := range sims {
			if slices.Contains(b, q) {
				lo = math.Min(lo, s)
			} else {
				hi = math.Max(hi, s)
			}
		}
		if lo >= hi-tol {
			continue
		}
		t.Errorf("%s: row %d's list %v differs from a from-scratch top-k (%v): %v, tta2.json lists %v", what, r, b, a, differs, want)
	}
}

// TestECALPFixture replays tta2's ECALP stream in each of the three orders
// at ties (ecalpFixtureRun). In torch's CPU order the public lists come out
// as stored, with nothing to align.
func TestECALPFixture(t *testing.T) {
	for _, o := range ecalpOrders {
		t.Run(o.name, func(t *testing.T) {
			n := ecalpFixtureRun(t, o)
			t.Logf("%s order: %d image rows aligned to the reference's choice at a tie", o.name, n)
			if o.name == "torch-cpu" && n != 0 {
				t.Errorf("torch's CPU order: %d rows differ from the public fixture's lists, want 0", n)
			}
		})
	}
}

// ecalpDuplicates is the stream of the duplicate-image variant made from
// the n rows of the shared ecalp.features: every row in order, rows 1, 5,
// 9, … twice in a row, row 1 once more halfway and the last row twice at
// the end; −1 − i stands for a near-duplicate of row i (one component one
// fp32 ulp up), after row n/3.
func ecalpDuplicates(n int) []int {
	var s []int
	for i := range n {
		s = append(s, i)
		if i%4 == 1 || i == n-1 {
			s = append(s, i)
		}
		if i == n/3 {
			s = append(s, -1-i)
		}
		if i == n/2 && n > 2 {
			s = append(s, 1)
		}
	}
	return s
}

// setECALPDuplicateVariant makes a fixture set (fixture.SetVariant) with
// renamed folders, other head counts, and tta2's ECALP run replaced by a
// reference on the stream ecalpDuplicates, computed by this port in fp32
// rounding with the order refOrder at ties. No PyTorch runs here, so the
// reference's numbers are this port's; what the variant checks is the
// tests' handling of ties, on a stream where they fall at every step, in
// an order other than the graph's.
func setECALPDuplicateVariant(t *testing.T, refOrder ecalpOrder) {
	t.Helper()
	_, _, cfg, feats, text := ecalpFixture(t)
	rows, d := feats.Dims()
	stream := ecalpDuplicates(rows)
	c, _ := text.Dims()
	g, err := NewECALPGraph(text, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.topk = refOrder.topk
	var add []fixture.Tensor
	f32 := func(name string, shape []int, v []float64) {
		b := make([]byte, 0, 4*len(v))
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(x)))
		}
		add = append(add, fixture.Tensor{Name: name, DType: "F32", Shape: shape, Data: b})
	}
	i64 := func(name string, shape []int, v []int) {
		b := make([]byte, 0, 8*len(v))
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, uint64(int64(x)))
		}
		add = append(add, fixture.Tensor{Name: name, DType: "I64", Shape: shape, Data: b})
	}
	dense := func(name string, m *mat.Dense) {
		r, cc := m.Dims()
		f32(name, []int{r, cc}, mat.DenseCopyOf(m).RawMatrix().Data)
	}
	var images, preds []int
	var features, probs []float64
	var perStep []map[string]any
	for i, src := range stream {
		f := slices.Clone(feats.RawRowView(max(src, -1-src)))
		if src < 0 {
			f[0] = float64(math.Nextafter32(float32(f[0]), float32(math.Inf(1))))
		}
		images = append(images, max(src, -1-src))
		features = append(features, f...)
		var tr ecalpTrace
		res, err := g.step(f, &tr)
		if err != nil {
			t.Fatal(err)
		}
		p := fmt.Sprintf("ecalp.s%d.", i)
		idx, sim := ecalpLayout(c, tr.images, tr.texts)
		rows, width := sim.Dims()
		i64(p+"knn", []int{rows, width}, idx)
		dense(p+"sim", sim)
		dense(p+"W_tilde", tr.wTilde)
		dense(p+"prior_in", tr.priorIn)
		for it, y := range tr.iterates {
			dense(fmt.Sprintf("%sY_iter%d", p, it+1), y)
		}
		dense(p+"prior_out", tr.priorOut)
		preds = append(preds, res.Pred)
		prob := slices.Clone(res.Scores)
		scale(prob, 10000)
		softmaxInPlace(prob)
		probs = append(probs, prob...)
		// Rows differing as the official generator lists them: plain set
		// inequality, in the reference's own order.
		differing := []int{}
		for r, l := range tr.images {
			a := slices.Clone(g.topK(scratchSims(g, r, len(tr.images)), nil, len(l.Index)).Index)
			b := slices.Clone(l.Index)
			slices.Sort(a)
			slices.Sort(b)
			if !slices.Equal(a, b) {
				differing = append(differing, r)
			}
		}
		perStep = append(perStep, map[string]any{"step": i, "nodes": rows, "pred": res.Pred, "rows": len(tr.images), "rows_differing": differing})
	}
	n := len(stream)
	f32("ecalp.features", []int{n, d}, features)
	i64("ecalp.pred", []int{n}, preds)
	f32("ecalp.pred_prob", []int{n, c}, probs)
	replaced := map[string]bool{}
	for _, a := range add {
		replaced[a.Name] = true
	}
	keep := func(name string) bool {
		if replaced[name] {
			return false
		}
		var s int
		var rest string
		if _, err := fmt.Sscanf(name, "ecalp.s%d.%s", &s, &rest); err == nil {
			return false // the public run's steps
		}
		return true
	}
	base := fixturefile.Config(t, "fixtures/clip-tiny.openai-fp16.pt")
	fixture.SetVariant(t, fixture.Variant{
		VisionHeads:   fixture.OtherHeads(base.Vision.Width),
		TextHeads:     fixture.OtherHeads(base.Text.Width),
		RenameFolders: true,
		Files: map[string]func(src, dst string) error{
			"tta2.safetensors": func(src, dst string) error { return fixture.RewriteTensors(src, dst, keep, add) },
			"tta2.json": func(src, dst string) error {
				b, err := os.ReadFile(src)
				if err != nil {
					return err
				}
				var js map[string]any
				if err := json.Unmarshal(b, &js); err != nil {
					return err
				}
				e, _ := js["ecalp"].(map[string]any)
				conf, _ := e["config"].(map[string]any)
				if conf == nil {
					return fmt.Errorf("no ecalp.config")
				}
				conf["images"] = images
				conf["stream"] = fmt.Sprintf("shared ecalp.features rows %v (−1−i: row i, one component one fp32 ulp up), reference by the Go port in %s order at ties", stream, refOrder.name)
				e["per_step"] = perStep
				if b, err = json.Marshal(js); err != nil {
					return err
				}
				return os.WriteFile(dst, b, 0o644)
			},
		},
	})
}

// TestECALPFixtureDuplicates runs the fixture test on a variant set whose
// ECALP stream holds the same image twice (next to each other and far
// apart) and a near-duplicate, with the reference made in each of two
// orders at ties, the graph running in each of the three: the lists must
// agree within equal-similarity groups and everything else under the
// reference's choice. It also checks that the variant puts ties at the
// cut, where the orders choose differently, so that the test is not
// vacuous.
func TestECALPFixtureDuplicates(t *testing.T) {
	for _, ref := range []ecalpOrder{ecalpOrders[1], ecalpOrders[2]} {
		t.Run("reference "+ref.name, func(t *testing.T) {
			setECALPDuplicateVariant(t, ref)
			for _, o := range ecalpOrders {
				t.Run(o.name, func(t *testing.T) {
					n := ecalpFixtureRun(t, o)
					t.Logf("graph in %s order, reference in %s order: %d image rows aligned at ties", o.name, ref.name, n)
					if o.name == ref.name && n != 0 {
						t.Errorf("same order as the reference: %d rows aligned, want 0", n)
					}
					if o.name != ref.name && o.name == "index" && n == 0 {
						t.Errorf("no row differs at a tie from the %s reference: the variant tests nothing", ref.name)
					}
				})
			}
		})
	}
}

// TestECALPListOrderFree checks that the graph depends on which nodes a
// list holds, not on their order in it: on the duplicate stream, a graph
// whose lists are reversed before every propagation gives the same labels
// as one whose lists are not (to float64 rounding; W = K + Kᵀ sums edges
// in another order).
func TestECALPListOrderFree(t *testing.T) {
	_, _, cfg, feats, text := ecalpFixture(t)
	c, _ := text.Dims()
	a, err := NewECALPGraph(text, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewECALPGraph(text, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rev := func(l ECALPNeighbours) ECALPNeighbours {
		l = l.clone()
		slices.Reverse(l.Index)
		slices.Reverse(l.Sim)
		return l
	}
	for i, src := range ecalpDuplicates(feats.RawMatrix().Rows) {
		f := slices.Clone(feats.RawRowView(max(src, -1-src)))
		if src < 0 {
			f[0] = float64(math.Nextafter32(float32(f[0]), float32(math.Inf(1))))
		}
		ra, err := a.Step(f)
		if err != nil {
			t.Fatal(err)
		}
		b.addFeature(f)
		b.expand()
		for r := range b.used {
			b.used[r], b.texts[r] = rev(b.used[r]), rev(b.texts[r])
		}
		rb := b.propagate(c, nil)
		fxt.Compare(t, fmt.Sprintf("step %d scores", i), rb.Scores, ra.Scores, 1e-12, fxt.Rel)
		if ra.Pred != rb.Pred {
			t.Errorf("step %d: pred %d with reversed lists, %d without", i, rb.Pred, ra.Pred)
		}
	}
}
