package feature

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// The epsilons inside DMN's logarithms ([DMN] dmn_main.py; fixtures README
// section 7, correction 2 of the baselines spec).
const (
	// DMNViewEntropyEps is in the view entropies that rank the views,
	// −Σ p·log(p + 1e-6) (select_confident_samples).
	DMNViewEntropyEps = 1e-6
	// DMNInstanceEntropyEps is in the entropy a memory entry is stored
	// with, −Σ p̄·log(p̄ + 1e-8) (DualMem.update_memory_bank).
	DMNInstanceEntropyEps = 1e-8
)

// DMNConfig configures DMN's zero-shot memory.
type DMNConfig struct {
	// Capacity is the number of entries per class (memory_size).
	Capacity int
	// Beta sharpens the memory attention exp(−β·(1 − ⟨f, k⟩)).
	Beta float64
	// SelectionP is the ratio of views averaged into the pseudo-label
	// (selection_p): int(V·p) of them.
	SelectionP float64
	// Weight multiplies the memory probabilities in the final score
	// p_txt + Weight·p_mem. DMN's code searches it post hoc with the labels;
	// a method uses a fixed value.
	Weight float64
	// Scale multiplies the cosines in both softmaxes: exp(logit_scale).
	Scale float64
}

// DefaultDMNConfig returns the distribution-shift settings of [DMN]
// scripts/run.sh (memory 50, β 5.5, selection 0.1), weight 1 (spec §5) and
// scale 100 (a model's exp(logit_scale) replaces it).
func DefaultDMNConfig() DMNConfig {
	return DMNConfig{Capacity: 50, Beta: 5.5, SelectionP: 0.1, Weight: 1, Scale: 100}
}

func (c DMNConfig) validate() error {
	switch {
	case c.Capacity < 1:
		return fmt.Errorf("feature: dmn: memory of %d entries per class", c.Capacity)
	case !(c.Beta >= 0) || math.IsInf(c.Beta, 1):
		return fmt.Errorf("feature: dmn: beta %v", c.Beta)
	case !(c.SelectionP > 0 && c.SelectionP <= 1):
		return fmt.Errorf("feature: dmn: selection ratio %v outside (0, 1]", c.SelectionP)
	case !(c.Weight >= 0) || math.IsInf(c.Weight, 1):
		return fmt.Errorf("feature: dmn: memory weight %v", c.Weight)
	case !(c.Scale > 0) || math.IsInf(c.Scale, 1):
		return fmt.Errorf("feature: dmn: logit scale %v must be positive", c.Scale)
	}
	return nil
}

// DMNEntry is one stored image: its normalised base-view feature and the
// entropy it was stored with.
type DMNEntry struct {
	Feature []float64
	Entropy float64
}

// DMNActionKind is what an insert did to the memory.
type DMNActionKind int

const (
	// DMNAppend: the class held fewer than Capacity entries; the image
	// went to the next free slot.
	DMNAppend DMNActionKind = iota
	// DMNReplace: the class was full and the image's entropy was lower
	// than at least one stored; it replaced the highest-entropy entry.
	DMNReplace
	// DMNSkip: the class was full and no stored entropy was higher.
	DMNSkip
)

func (k DMNActionKind) String() string {
	switch k {
	case DMNAppend:
		return "append"
	case DMNReplace:
		return "replace"
	case DMNSkip:
		return "skip"
	}
	return fmt.Sprintf("DMNActionKind(%d)", int(k))
}

// DMNAction is an insert's effect: the class, and the slot written (−1 for
// DMNSkip).
type DMNAction struct {
	Kind  DMNActionKind
	Class int
	Slot  int
}

// DMNMemory is the zero-shot Dual Memory Network's dynamic memory (spec §5
// and its correction 2; [DMN] dmn_main.py DualMem, direct_inference with
// n_shot = 0): per class up to Capacity normalised image features with
// their entropies, filled from the test stream one image at a time and
// read by an attention whose keys are the class's entries plus its text
// embedding. It persists across the images of a domain (Reset clears it).
// The learnable projections of DualMem are zero (identity mapping) in
// zero-shot use and do not appear here.
type DMNMemory struct {
	cfg     DMNConfig
	head    *mat.Dense // C×d, unit rows
	entries [][]DMNEntry
}

// NewDMNMemory returns an empty memory over the head (C×d, the normalised
// class embeddings).
func NewDMNMemory(head mat.Matrix, cfg DMNConfig) (*DMNMemory, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if c, d := head.Dims(); c < 1 || d < 1 {
		return nil, fmt.Errorf("feature: dmn: empty head (%d×%d)", c, d)
	}
	m := &DMNMemory{cfg: cfg, head: mat.DenseCopyOf(head)}
	m.Reset()
	return m, nil
}

// Config returns the memory's configuration.
func (m *DMNMemory) Config() DMNConfig { return m.cfg }

// Reset empties the memory (at the start of each domain).
func (m *DMNMemory) Reset() {
	c, _ := m.head.Dims()
	m.entries = make([][]DMNEntry, c)
}

// DMNResult is DMNMemory.Step's result for one image.
type DMNResult struct {
	// Probs are softmax(Scale·normalize(f_v)·Tᵀ) (V×C); PText is row 0.
	Probs *mat.Dense
	PText []float64
	// Selection ranks the views by −Σ p·log(p + 1e-6).
	Selection *Selection
	// MeanProb is the mean of the kept rows of Probs, PseudoLabel its
	// argmax, InstanceEntropy −Σ p̄·log(p̄ + 1e-8).
	MeanProb        []float64
	PseudoLabel     int
	InstanceEntropy float64
	// Action is what the insert did.
	Action DMNAction
	// PMem is the memory's prediction after the insert (Predict); Final
	// is PText + Weight·PMem and Pred its argmax.
	PMem  []float64
	Final []float64
	Pred  int
}

// Step classifies one image from its view features f (V×d, row 0 the base
// view; normalised here) in DMN's order: the text probabilities of every
// view, the pseudo-label from the mean probability of the int(V·p)
// lowest-entropy views, the insert of the base view's feature under that
// label (Insert), and then, with the image already in memory, the memory
// prediction of the base view (Predict) added to its text probabilities.
func (m *DMNMemory) Step(f mat.Matrix) (*DMNResult, error) {
	if err := checkFeatures(f, m.head, "dmn"); err != nil {
		return nil, err
	}
	v, _ := f.Dims()
	c, _ := m.head.Dims()
	keep, err := KeepCount(v, m.cfg.SelectionP)
	if err != nil {
		return nil, fmt.Errorf("feature: dmn: %w", err)
	}
	fn, _ := NormalizeRows(f)
	logits := Logits(fn, m.head, m.cfg.Scale)
	h, err := SoftmaxEntropies(logits, DMNViewEntropyEps)
	if err != nil {
		return nil, fmt.Errorf("feature: dmn: %w", err)
	}
	sel, err := SelectLowestEntropy(h, keep)
	if err != nil {
		return nil, fmt.Errorf("feature: dmn: %w", err)
	}
	probs := mat.NewDense(v, c, nil)
	for i := range v {
		row := probs.RawRowView(i)
		copy(row, logits.RawRowView(i))
		softmaxInPlace(row)
	}
	mean := make([]float64, c)
	for _, i := range sel.Kept {
		for k, p := range probs.RawRowView(i) {
			mean[k] += p
		}
	}
	for k := range mean {
		mean[k] /= float64(keep)
	}
	var hInst float64
	for _, p := range mean {
		hInst -= p * math.Log(p+DMNInstanceEntropyEps)
	}
	label := argmaxSlice(mean)
	f0 := fn.RawRowView(0)
	action, err := m.Insert(f0, label, hInst)
	if err != nil {
		return nil, err
	}
	pmem, err := m.Predict(f0)
	if err != nil {
		return nil, err
	}
	pText := slices.Clone(probs.RawRowView(0))
	final := make([]float64, c)
	for k := range final {
		final[k] = pText[k] + m.cfg.Weight*pmem[k]
	}
	return &DMNResult{
		Probs:           probs,
		PText:           pText,
		Selection:       sel,
		MeanProb:        mean,
		PseudoLabel:     label,
		InstanceEntropy: hInst,
		Action:          action,
		PMem:            pmem,
		Final:           final,
		Pred:            argmaxSlice(final),
	}, nil
}

// Insert stores the feature (normalised, length d) under class label with
// the given entropy, by DualMem.update_memory_bank's rule: appended while
// the class holds fewer than Capacity entries; once full, it replaces the
// entry of highest entropy if its entropy is strictly lower than at least
// one stored entropy, and is skipped otherwise. Among equal highest
// entropies the last slot is replaced (the last of a stable ascending
// sort; the code's torch.sort promises no order there).
func (m *DMNMemory) Insert(feature []float64, label int, entropy float64) (DMNAction, error) {
	c, d := m.head.Dims()
	if label < 0 || label >= c {
		return DMNAction{}, fmt.Errorf("feature: dmn: label %d outside 0..%d", label, c-1)
	}
	if len(feature) != d {
		return DMNAction{}, fmt.Errorf("feature: dmn: feature of %d dims, the head has %d", len(feature), d)
	}
	e := DMNEntry{Feature: slices.Clone(feature), Entropy: entropy}
	list := m.entries[label]
	if len(list) < m.cfg.Capacity {
		m.entries[label] = append(list, e)
		return DMNAction{Kind: DMNAppend, Class: label, Slot: len(list)}, nil
	}
	worst := 0
	for i, s := range list {
		if s.Entropy >= list[worst].Entropy {
			worst = i
		}
	}
	if !(entropy < list[worst].Entropy) {
		return DMNAction{Kind: DMNSkip, Class: label, Slot: -1}, nil
	}
	list[worst] = e
	return DMNAction{Kind: DMNReplace, Class: label, Slot: worst}, nil
}

// Predict is DualMem.get_image_pred ("similarity_weighted") for the
// normalised base-view feature f (length d): for every class c, with keys
// k the normalised stored features of c and its text embedding T_c
// (always present; empty slots add nothing),
//
//	a_k = exp(−β·(1 − ⟨f, k⟩)),  q_c = normalize(Σ_k a_k·k),
//
// and the result is softmax_c(Scale·⟨q_c, f⟩).
func (m *DMNMemory) Predict(f []float64) ([]float64, error) {
	c, d := m.head.Dims()
	if len(f) != d {
		return nil, fmt.Errorf("feature: dmn: feature of %d dims, the head has %d", len(f), d)
	}
	out := make([]float64, c)
	proto := make([]float64, d)
	key := make([]float64, d)
	for y := range c {
		clear(proto)
		add := func(k []float64) {
			copy(key, k)
			scale(key, 1/math.Max(math.Sqrt(dot(key, key)), normEps))
			a := math.Exp(-m.cfg.Beta * (1 - dot(f, key)))
			for j, v := range key {
				proto[j] += a * v
			}
		}
		for _, e := range m.entries[y] {
			add(e.Feature)
		}
		add(m.head.RawRowView(y))
		out[y] = m.cfg.Scale * dot(proto, f) / math.Max(math.Sqrt(dot(proto, proto)), normEps)
	}
	softmaxInPlace(out)
	return out, nil
}

// Entries returns a copy of the memory, one list per class in slot order,
// for saving.
func (m *DMNMemory) Entries() [][]DMNEntry {
	out := make([][]DMNEntry, len(m.entries))
	for y, list := range m.entries {
		for _, e := range list {
			out[y] = append(out[y], DMNEntry{Feature: slices.Clone(e.Feature), Entropy: e.Entropy})
		}
	}
	return out
}

// SetEntries replaces the memory with what Entries returned, after
// checking that it has one list per class, at most Capacity entries per
// class, features of the head's width and finite values; on an error
// nothing changes.
func (m *DMNMemory) SetEntries(entries [][]DMNEntry) error {
	c, d := m.head.Dims()
	if len(entries) != c {
		return fmt.Errorf("feature: dmn: saved memory of %d classes, the head has %d", len(entries), c)
	}
	next := make([][]DMNEntry, c)
	for y, list := range entries {
		if len(list) > m.cfg.Capacity {
			return fmt.Errorf("feature: dmn: saved memory of class %d holds %d entries, more than %d", y, len(list), m.cfg.Capacity)
		}
		for i, e := range list {
			if len(e.Feature) != d {
				return fmt.Errorf("feature: dmn: saved entry %d of class %d has %d dims, the head %d", i, y, len(e.Feature), d)
			}
			finite := !math.IsNaN(e.Entropy) && !math.IsInf(e.Entropy, 0)
			for _, v := range e.Feature {
				finite = finite && !math.IsNaN(v) && !math.IsInf(v, 0)
			}
			if !finite {
				return fmt.Errorf("feature: dmn: saved entry %d of class %d is not finite", i, y)
			}
			next[y] = append(next[y], DMNEntry{Feature: slices.Clone(e.Feature), Entropy: e.Entropy})
		}
	}
	m.entries = next
	return nil
}
