package feature

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// ErrStateMismatch is wrapped by the state setters of this package
// (ECALPGraph.SetState, RoTTAMemory.SetItems) when saved state does not fit
// the receiver's configuration.
var ErrStateMismatch = errors.New("feature: saved state does not fit")

// ECALPConfig configures ECALP ([E] Yushu-Li/ECALP@96ddf0b main.py, the
// zero-shot loop; utils/iterative_label_propagation.py).
type ECALPConfig struct {
	// KText and KImage are the neighbours of every image node among the
	// classes and among the images (each capped by the nodes available).
	KText, KImage int
	// Gamma is the power of every edge weight, sim^γ. The code's γ = 10 is
	// even, so a negative similarity gives a positive weight; an odd or
	// fractional γ would give negative or NaN weights, as in the code.
	Gamma float64
	// Alpha weighs propagation against the prior:
	// Y ← α·W̃·[I; Y] + (1−α)·Y⁰.
	Alpha float64
	// Iterations is the number of propagation rounds.
	Iterations int
}

// DefaultECALPConfig returns [E] main.py's defaults, the same for every
// task: k_text 3, k_image 8, γ 10, α 1, 3 iterations.
func DefaultECALPConfig() ECALPConfig {
	return ECALPConfig{KText: 3, KImage: 8, Gamma: 10, Alpha: 1, Iterations: 3}
}

func (c ECALPConfig) validate() error {
	if c.KText < 1 || c.KImage < 1 || c.Iterations < 1 {
		return fmt.Errorf("feature: ecalp: k_text %d, k_image %d and iterations %d must be positive", c.KText, c.KImage, c.Iterations)
	}
	if math.IsNaN(c.Gamma) || math.IsNaN(c.Alpha) {
		return fmt.Errorf("feature: ecalp: γ %g and α %g must be numbers", c.Gamma, c.Alpha)
	}
	return nil
}

// ECALPNeighbours is one node's neighbour list, best first: node indices
// (images counted from 0, or classes) and their similarities before the
// power γ.
type ECALPNeighbours struct {
	Index []int
	Sim   []float64
}

func (l ECALPNeighbours) clone() ECALPNeighbours {
	return ECALPNeighbours{Index: slices.Clone(l.Index), Sim: slices.Clone(l.Sim)}
}

// ECALPGraph is ECALP's streaming graph ([E] dynamic_graph_expansion,
// iterative_label_propagation; spec §6 and its correction 3), training-free
// and one image at a time. At image i its nodes are the C classes, the
// images f₀…f_i and f_i once more (the code's duplicate, whose labels are
// the prediction). Each image links to its nearest images and classes with
// weight sim^γ; the symmetrised, degree-normalised graph propagates the
// classes' one-hot labels and a sparse prior from the previous image for a
// few rounds.
//
// The image–image lists are kept incrementally, as the code keeps them,
// and differ from a from-scratch k-nearest-neighbour search:
//   - similarity is s(q, x) = ⟨normalize(w⊙f_q), normalize(f_x)⟩ with w the
//     L2-normalised per-dimension variance of the text features (unbiased);
//     w sits on the side of the older node q both when an old node meets the
//     new image and when the new image chooses its own neighbours;
//   - every row keeps spare candidates beyond k (up to k+2), and candidates
//     pointing to the previous duplicate are invalidated with similarity −1
//     rather than removed;
//   - the new image and its duplicate get the same list, computed once.
//
// Ties. The newest image and its duplicate are equally similar to every
// node, and so are two copies of one image in the stream. The code takes
// lists with torch's top-k, whose order among equal values is no part of
// the method: it differs between CPU and GPU and between torch versions.
// Here the rule is documented instead: the larger similarity first and,
// at equal similarities, the lower node index first (class index for the
// class lists). The edges depend on which nodes a list holds, not on their
// order in it (W = K + Kᵀ sums them), so wherever the code's graph is
// independent of the order at ties this one is too; and the rule is a
// total order, so the lists depend on the candidates alone, not on the
// order in which they are offered. Where a tie straddles a list's cut (the
// k-th place of a list, or the last spare kept), the code's graph does
// depend on the order, and this one keeps the lower index: the older of
// two copies of an image, and the newest image rather than its duplicate
// (an edge to the duplicate is invalidated at the next image, an edge to
// the image stays).
//
// Cost: every image recomputes every node's lists and labels, as the code
// does: O(N·d) for the similarities and O(N·(k_image + k_text)·s) for the
// graph and the propagation (s the labels' support), O(N²) over a domain
// of N images (BenchmarkECALPStream).
type ECALPGraph struct {
	cfg  ECALPConfig
	text *mat.Dense // C×d as given (normalised class embeddings)
	w    []float64  // normalize(var(text, dim 0))

	feat     [][]float64 // the images' features as given, f₀…f_i (no duplicate)
	weighted [][]float64 // normalize(w⊙f)
	unit     [][]float64 // normalize(f)

	// Per node, duplicate included (i+2 rows after image i): the image
	// candidates with their spares, and the class neighbours.
	images []ECALPNeighbours
	texts  []ECALPNeighbours
	// used are the image lists of the current step's graph (the first k
	// of images, selected anew for the newest image).
	used []ECALPNeighbours
	// prior is Y⁰ for the next image: per node its class and value (the
	// largest entry of the final labels, divided by 5), duplicate included.
	priorClass []int
	priorValue []float64

	// topk selects a list's first k candidates in order (indexTopK; the
	// tests substitute other orders at ties).
	topk func(q []rankItem, k int) []rankItem
}

// NewECALPGraph returns an empty graph over the class embeddings text
// (C×d, L2-normalised rows as the code's head; used as given).
func NewECALPGraph(text mat.Matrix, cfg ECALPConfig) (*ECALPGraph, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, d := text.Dims()
	if c < 2 || d < 1 {
		return nil, fmt.Errorf("feature: ecalp: text features %d×%d, want at least 2 classes", c, d)
	}
	g := &ECALPGraph{cfg: cfg, text: mat.DenseCopyOf(text), w: ECALPVarianceWeights(text), topk: indexTopK}
	return g, nil
}

// ECALPVarianceWeights is [E] edge_reweighting's w: the unbiased variance
// of every dimension of text (C×d) across classes, L2-normalised.
func ECALPVarianceWeights(text mat.Matrix) []float64 {
	c, d := text.Dims()
	w := make([]float64, d)
	for j := range d {
		var mean float64
		for i := range c {
			mean += text.At(i, j)
		}
		mean /= float64(c)
		var ss float64
		for i := range c {
			x := text.At(i, j) - mean
			ss += x * x
		}
		w[j] = ss / float64(c-1)
	}
	scale(w, 1/math.Max(math.Sqrt(dot(w, w)), normEps))
	return w
}

// Reset empties the graph (the code starts over at a domain's first
// image).
func (g *ECALPGraph) Reset() {
	g.feat, g.weighted, g.unit = nil, nil, nil
	g.images, g.texts, g.used = nil, nil, nil
	g.priorClass, g.priorValue = nil, nil
}

// Len is the number of images in the graph.
func (g *ECALPGraph) Len() int { return len(g.feat) }

// ECALPResult is ECALP's output for one image.
type ECALPResult struct {
	// Scores are the duplicate node's propagated labels (length C); the
	// code returns softmax(10000·Scores), which saturates, so only their
	// argmax is used.
	Scores []float64
	Pred   int // argmax of Scores, the first on ties
}

// ecalpTrace receives the intermediates of one step (for the fixture
// tests): the neighbour lists of every node, W̃ dense, the prior and every
// iterate, and the next prior, all over the image nodes.
type ecalpTrace struct {
	images, texts []ECALPNeighbours // the lists used (image lists cut to k)
	wTilde        *mat.Dense
	priorIn       *mat.Dense
	iterates      []*mat.Dense
	priorOut      *mat.Dense
}

// Step adds the image feature f (length d, as the code is fed it: the
// L2-normalised base-view feature, or a mean of such features over views)
// and returns its prediction.
func (g *ECALPGraph) Step(f []float64) (*ECALPResult, error) {
	return g.step(f, nil)
}

func (g *ECALPGraph) step(f []float64, tr *ecalpTrace) (*ECALPResult, error) {
	c, d := g.text.Dims()
	if len(f) != d {
		return nil, fmt.Errorf("feature: ecalp: image feature of %d dims, text features have %d", len(f), d)
	}
	for _, v := range f {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, errors.New("feature: ecalp: image feature is not finite")
		}
	}
	g.addFeature(f)
	g.expand()
	return g.propagate(c, tr), nil
}

// addFeature appends a copy of the image feature f with its weighted and
// plain normalisations.
func (g *ECALPGraph) addFeature(f []float64) {
	f = slices.Clone(f)
	wf := make([]float64, len(f))
	for j := range f {
		wf[j] = g.w[j] * f[j]
	}
	unit := slices.Clone(f)
	scale(wf, 1/math.Max(math.Sqrt(dot(wf, wf)), normEps))
	scale(unit, 1/math.Max(math.Sqrt(dot(unit, unit)), normEps))
	g.feat = append(g.feat, f)
	g.weighted = append(g.weighted, wf)
	g.unit = append(g.unit, unit)
}

// node returns image node q's features (the last node is the duplicate of
// the newest image).
func (g *ECALPGraph) node(q int) (weighted, unit []float64) {
	q = min(q, len(g.feat)-1)
	return g.weighted[q], g.unit[q]
}

// expand is [E] dynamic_graph_expansion for the newest image: it updates
// the stored image candidates and the class neighbours of every node.
func (g *ECALPGraph) expand() {
	n := len(g.feat) + 1 // image nodes, duplicate included
	kIm := min(g.cfg.KImage, n)
	newest := len(g.feat) - 1

	// Class neighbours by plain dot product, computed once per image; the
	// duplicate copies the newest.
	c, _ := g.text.Dims()
	ts := make([]float64, c)
	for k := range c {
		ts[k] = dot(g.feat[newest], g.text.RawRowView(k))
	}
	txt := g.topK(ts, nil, min(g.cfg.KText, c))
	if n > 2 {
		g.texts = g.texts[:n-2]
	} else {
		g.texts = g.texts[:0]
	}
	g.texts = append(g.texts, txt, txt.clone())

	if n == 2 {
		// First image: the full 2×2 similarity, weight on the query side.
		g.images = g.images[:0]
		for q := range 2 {
			wq, _ := g.node(q)
			sims := make([]float64, 2)
			for x := range 2 {
				_, ux := g.node(x)
				sims[x] = dot(wq, ux)
			}
			g.images = append(g.images, g.topK(sims, nil, kIm))
		}
		g.used = append(g.used[:0], g.images...)
		return
	}

	// s[q] = ⟨normalize(w⊙f_q), normalize(f_new)⟩ for every node q: what an
	// old node sees of the new image and its duplicate, and what the new
	// image sees of q (the code's sim_full_cr, weight on q's side).
	s := make([]float64, n)
	unew := g.unit[newest]
	for q := range n {
		wq, _ := g.node(q)
		s[q] = dot(wq, unew)
	}
	old := n - 2 // rows of earlier images
	kNew := kIm
	switch {
	case old == kIm+1:
		kNew = kIm + 1
	case old > kIm:
		kNew = kIm + 2
	}
	prevDup := n - 2 // the previous duplicate's index, now the newest image
	rows := g.images[:old]
	for r := range rows {
		cand := rows[r]
		idx := append(slices.Clone(cand.Index), n-2, n-1)
		sim := append(slices.Clone(cand.Sim), s[r], s[r])
		for j, q := range cand.Index {
			if q == prevDup {
				sim[j] = -1 // invalidated, as the code does, not removed
			}
		}
		rows[r] = g.topK(sim, idx, kNew)
	}
	fresh := g.topK(s, nil, kNew)
	g.images = append(rows, fresh, fresh.clone())
	// The lists used are every stored list's first k, except the newest
	// image's and its duplicate's, which the code selects again with k.
	g.used = g.used[:0]
	for _, l := range rows {
		g.used = append(g.used, ECALPNeighbours{Index: l.Index[:kIm], Sim: l.Sim[:kIm]})
	}
	used := g.topK(s, nil, kIm)
	g.used = append(g.used, used, used.clone())
}

// topK returns the k largest of sims, best first, with their indices
// idx (nil: the positions themselves), ties in the graph's order (topk.go).
func (g *ECALPGraph) topK(sims []float64, idx []int, k int) ECALPNeighbours {
	q := make([]rankItem, len(sims))
	for i, v := range sims {
		q[i] = rankItem{v: v, idx: i}
		if idx != nil {
			q[i].idx = idx[i]
		}
	}
	top := g.topk(q, k)
	out := ECALPNeighbours{Index: make([]int, len(top)), Sim: make([]float64, len(top))}
	for i, it := range top {
		out.Index[i], out.Sim[i] = it.idx, it.v
	}
	return out
}

// sparseRow is a row of a sparse matrix, columns ascending.
type sparseRow struct {
	col []int
	val []float64
}

// propagate builds W̃ from the neighbour lists, propagates the labels and
// keeps the next prior ([E] iterative_label_propagation).
func (g *ECALPGraph) propagate(c int, tr *ecalpTrace) *ECALPResult {
	n := len(g.images)
	total := c + n
	adj := g.adjacency(c)
	dinv := make([]float64, total)
	for a := range total {
		var deg float64
		for _, v := range adj.val[adj.ptr[a]:adj.ptr[a+1]] {
			deg += v
		}
		dinv[a] = 1 / (math.Sqrt(deg) + 1e-6)
	}
	// W̃ over the image rows only (the text rows' labels are fixed):
	// wtVal[j] for the entries of rows C… of adj.
	base := adj.ptr[c]
	wtVal := make([]float64, adj.ptr[total]-base)
	for a := c; a < total; a++ {
		for j := adj.ptr[a]; j < adj.ptr[a+1]; j++ {
			wtVal[j-base] = dinv[a] * adj.val[j] * dinv[adj.col[j]]
		}
	}

	// Y⁰: the previous prior without its duplicate's row, and two empty rows.
	y0 := make([]sparseRow, n)
	for r := range min(n-2, len(g.priorClass)) {
		if g.priorValue[r] != 0 {
			y0[r] = sparseRow{col: []int{g.priorClass[r]}, val: []float64{g.priorValue[r]}}
		}
	}
	if tr != nil {
		tr.images = g.used
		tr.texts = g.texts
		tr.wTilde = mat.NewDense(total, total, nil)
		for a := range total {
			for j := adj.ptr[a]; j < adj.ptr[a+1]; j++ {
				tr.wTilde.Set(a, adj.col[j], dinv[a]*adj.val[j]*dinv[adj.col[j]])
			}
		}
		tr.priorIn = denseRows(y0, c)
	}

	alpha := g.cfg.Alpha
	acc := make([]float64, c)
	seen := make([]bool, c)
	touched := make([]int, 0, c)
	y := y0
	for range g.cfg.Iterations {
		next := make([]sparseRow, n)
		var cols []int
		var vals []float64
		for r := range n {
			touched = touched[:0]
			add := func(k int, v float64) {
				if !seen[k] {
					seen[k] = true
					touched = append(touched, k)
				}
				acc[k] += v
			}
			a := c + r
			for j := adj.ptr[a]; j < adj.ptr[a+1]; j++ {
				b, w := adj.col[j], alpha*wtVal[j-base]
				if b < c {
					add(b, w)
					continue
				}
				src := y[b-c]
				for t, k := range src.col {
					add(k, w*src.val[t])
				}
			}
			if alpha != 1 {
				for t, k := range y0[r].col {
					add(k, (1-alpha)*y0[r].val[t])
				}
			}
			slices.Sort(touched)
			start := len(cols)
			for _, k := range touched {
				cols, vals = append(cols, k), append(vals, acc[k])
				acc[k], seen[k] = 0, false
			}
			next[r] = sparseRow{col: cols[start:len(cols):len(cols)], val: vals[start:len(vals):len(vals)]}
		}
		y = next
		if tr != nil {
			tr.iterates = append(tr.iterates, denseRows(y, c))
		}
	}

	// The next prior: per row the largest entry over all C classes (a
	// zero outside the support counts), divided by 5.
	g.priorClass = make([]int, n)
	g.priorValue = make([]float64, n)
	for r, row := range y {
		k, v := row.argmax(c)
		g.priorClass[r], g.priorValue[r] = k, v/5
	}
	if tr != nil {
		tr.priorOut = mat.NewDense(n, c, nil)
		for r := range n {
			tr.priorOut.Set(r, g.priorClass[r], g.priorValue[r])
		}
	}
	scores := make([]float64, c)
	last := y[n-1]
	for t, k := range last.col {
		scores[k] = last.val[t]
	}
	return &ECALPResult{Scores: scores, Pred: Argmax(mat.NewDense(1, c, scores))[0]}
}

// csr is a sparse matrix in compressed rows: row a's entries are
// col[ptr[a]:ptr[a+1]], ascending, and val alike.
type csr struct {
	ptr []int
	col []int
	val []float64
}

// adjacency returns W = K + Kᵀ over the C+n nodes, where K holds the
// directed edges image → neighbour of the current lists with weight sim^γ
// (zeros dropped, as knn_to_weighted_adj_matrix does); repeated entries
// are summed, as torch's coalesce does.
func (g *ECALPGraph) adjacency(c int) csr {
	n := len(g.images)
	total := c + n
	type entry struct {
		a, b int
		v    float64
	}
	width := 0
	if n > 0 {
		width = len(g.used[0].Index) + len(g.texts[0].Index)
	}
	es := make([]entry, 0, 2*n*width)
	edge := func(a, b int, s float64) {
		if v := math.Pow(s, g.cfg.Gamma); v != 0 {
			es = append(es, entry{a, b, v}, entry{b, a, v})
		}
	}
	for r := range n {
		for j, q := range g.used[r].Index {
			edge(c+r, c+q, g.used[r].Sim[j])
		}
		for j, k := range g.texts[r].Index {
			edge(c+r, k, g.texts[r].Sim[j])
		}
	}
	// Bucket by row (stable), then order each row by column.
	m := csr{ptr: make([]int, total+1)}
	for _, e := range es {
		m.ptr[e.a+1]++
	}
	for a := range total {
		m.ptr[a+1] += m.ptr[a]
	}
	rows := make([]entry, len(es))
	next := slices.Clone(m.ptr[:total])
	for _, e := range es {
		rows[next[e.a]] = e
		next[e.a]++
	}
	m.col = make([]int, 0, len(es))
	m.val = make([]float64, 0, len(es))
	for a := range total {
		seg := rows[m.ptr[a]:m.ptr[a+1]]
		if !slices.IsSortedFunc(seg, func(x, y entry) int { return x.b - y.b }) {
			slices.SortStableFunc(seg, func(x, y entry) int { return x.b - y.b })
		}
		m.ptr[a] = len(m.col)
		for i, e := range seg {
			if i > 0 && seg[i-1].b == e.b {
				m.val[len(m.val)-1] += e.v
				continue
			}
			m.col, m.val = append(m.col, e.b), append(m.val, e.v)
		}
	}
	m.ptr[total] = len(m.col)
	return m
}

// argmax returns the first largest entry of the row as a dense row of c
// columns (zeros outside the support count), and its value.
func (r sparseRow) argmax(c int) (int, float64) {
	best, bestV := -1, math.Inf(-1)
	for t, k := range r.col {
		if v := r.val[t]; v > bestV {
			best, bestV = k, v
		}
	}
	if len(r.col) < c && !(bestV > 0) {
		// The first column outside the support holds a zero.
		z := 0
		for _, k := range r.col {
			if k != z {
				break
			}
			z++
		}
		if best < 0 || bestV < 0 || z < best {
			best, bestV = z, 0
		}
	}
	return best, bestV
}

func denseRows(rows []sparseRow, c int) *mat.Dense {
	out := mat.NewDense(len(rows), c, nil)
	for r, row := range rows {
		for t, k := range row.col {
			out.Set(r, k, row.val[t])
		}
	}
	return out
}

// ECALPState is an ECALPGraph's state between two images, for saving: the
// images' features as Step received them (f₀…f_i), and per node, the
// duplicate of f_i included (i+2 rows), the stored image candidates with
// their spares, the class neighbours and the prior for the next image
// (class and value; a value of 0 is no prior).
type ECALPState struct {
	Features   [][]float64
	Images     []ECALPNeighbours
	Texts      []ECALPNeighbours
	PriorClass []int
	PriorValue []float64
}

// State returns a copy of the graph's state.
func (g *ECALPGraph) State() ECALPState {
	s := ECALPState{PriorClass: slices.Clone(g.priorClass), PriorValue: slices.Clone(g.priorValue)}
	for _, f := range g.feat {
		s.Features = append(s.Features, slices.Clone(f))
	}
	for _, l := range g.images {
		s.Images = append(s.Images, l.clone())
	}
	for _, l := range g.texts {
		s.Texts = append(s.Texts, l.clone())
	}
	return s
}

// SetState replaces the graph's state with a copy of s, after checking
// that it fits the graph's classes, dimensions and k; errors wrap
// ErrStateMismatch and leave the graph unchanged.
func (g *ECALPGraph) SetState(s ECALPState) error {
	c, d := g.text.Dims()
	m := len(s.Features)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: ecalp: "+format, append([]any{ErrStateMismatch}, a...)...)
	}
	if m == 0 {
		if len(s.Images)+len(s.Texts)+len(s.PriorClass)+len(s.PriorValue) != 0 {
			return bad("neighbour lists or prior without features")
		}
		g.Reset()
		return nil
	}
	n := m + 1
	if len(s.Images) != n || len(s.Texts) != n || len(s.PriorClass) != n || len(s.PriorValue) != n {
		return bad("%d images need %d rows of image lists, class lists and prior; got %d, %d, %d, %d",
			m, n, len(s.Images), len(s.Texts), len(s.PriorClass), len(s.PriorValue))
	}
	for i, f := range s.Features {
		if len(f) != d {
			return bad("feature %d has %d dims, the text features %d", i, len(f), d)
		}
		for _, v := range f {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return bad("feature %d is not finite", i)
			}
		}
	}
	kIm, kTxt := min(g.cfg.KImage, n), min(g.cfg.KText, c)
	for r := range n {
		im, tx := s.Images[r], s.Texts[r]
		if len(im.Index) != len(im.Sim) || len(im.Index) < kIm || len(im.Index) > kIm+2 {
			return bad("node %d keeps %d image candidates (%d similarities), want %d to %d", r, len(im.Index), len(im.Sim), kIm, kIm+2)
		}
		for _, q := range im.Index {
			if q < 0 || q >= n {
				return bad("node %d has image neighbour %d of %d nodes", r, q, n)
			}
		}
		if len(tx.Index) != kTxt || len(tx.Sim) != kTxt {
			return bad("node %d has %d class neighbours (%d similarities), want %d", r, len(tx.Index), len(tx.Sim), kTxt)
		}
		for _, k := range tx.Index {
			if k < 0 || k >= c {
				return bad("node %d has class neighbour %d of %d classes", r, k, c)
			}
		}
		if k := s.PriorClass[r]; k < 0 || k >= c {
			return bad("node %d has prior class %d of %d", r, k, c)
		}
	}
	g.Reset()
	for _, f := range s.Features {
		g.addFeature(f)
	}
	for r := range n {
		g.images = append(g.images, s.Images[r].clone())
		g.texts = append(g.texts, s.Texts[r].clone())
	}
	g.priorClass, g.priorValue = slices.Clone(s.PriorClass), slices.Clone(s.PriorValue)
	return nil
}
