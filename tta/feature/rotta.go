package feature

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// RoTTAMemoryConfig configures RoTTA's category-balanced memory ([H]
// mariodoebler/test-time-adaptation@8b2ed63 methods/rotta.py, class CSTU;
// BIT-DA/RoTTA@67e34c9; spec §7).
type RoTTAMemoryConfig struct {
	// Capacity is the number of items the memory holds (MEMORY_SIZE, 64).
	Capacity int
	// Classes is the number of classes; a class's quota is
	// Capacity/Classes, fractional.
	Classes int
	// LambdaT and LambdaU weigh an item's age and uncertainty in its
	// score (LAMBDA_T, LAMBDA_U: 1 and 1).
	LambdaT, LambdaU float64
}

// DefaultRoTTAMemoryConfig returns the harness' and the official code's
// memory for the given number of classes: capacity 64, λ_t = λ_u = 1.
func DefaultRoTTAMemoryConfig(classes int) RoTTAMemoryConfig {
	return RoTTAMemoryConfig{Capacity: 64, Classes: classes, LambdaT: 1, LambdaU: 1}
}

func (c RoTTAMemoryConfig) validate() error {
	if c.Capacity < 1 || c.Classes < 2 {
		return fmt.Errorf("feature: rotta: memory of capacity %d over %d classes, want at least 1 and 2", c.Capacity, c.Classes)
	}
	if math.IsNaN(c.LambdaT) || math.IsNaN(c.LambdaU) {
		return errors.New("feature: rotta: λ_t and λ_u must be numbers")
	}
	return nil
}

// RoTTAItem is one item of the memory: the caller's data (an image), its
// pseudo-label, its uncertainty (the teacher's entropy) and its age, the
// number of insertions it has seen, its own included.
type RoTTAItem[T any] struct {
	Data        T
	Class       int
	Uncertainty float64
	Age         int
}

// RoTTAMemory is RoTTA's category-balanced sampling with timeliness and
// uncertainty (CSTU): a memory of at most Capacity test samples whose
// classes are kept balanced and whose oldest, most uncertain items leave
// first. An item's score is
//
//	λ_t·σ(age/Capacity) + λ_u·u/log C,  σ the logistic function,
//
// and a new sample scores with age 0. Inserting a sample of class y:
//   - if y holds fewer items than its quota Capacity/C, the sample is
//     added while the memory is not full; when it is full, the item of
//     highest score among the classes holding the most items is evicted
//     for it, but only if that score exceeds the sample's;
//   - if y is at its quota, the same search runs within y alone.
//
// Among equal scores the last item in class-major order is evicted (the
// code's ≥). Then every item ages by one, the new one included.
type RoTTAMemory[T any] struct {
	cfg      RoTTAMemoryConfig
	perClass float64
	classes  [][]RoTTAItem[T] // per class, in insertion order
}

// NewRoTTAMemory returns an empty memory.
func NewRoTTAMemory[T any](cfg RoTTAMemoryConfig) (*RoTTAMemory[T], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &RoTTAMemory[T]{cfg: cfg, perClass: float64(cfg.Capacity) / float64(cfg.Classes)}
	m.Reset()
	return m, nil
}

// Reset empties the memory (the method resets it with the models at a
// new domain).
func (m *RoTTAMemory[T]) Reset() {
	m.classes = make([][]RoTTAItem[T], m.cfg.Classes)
}

// Len is the number of items held.
func (m *RoTTAMemory[T]) Len() int {
	n := 0
	for _, l := range m.classes {
		n += len(l)
	}
	return n
}

// Score is an item's heuristic score ([H] CSTU.heuristic_score).
func (m *RoTTAMemory[T]) Score(age int, uncertainty float64) float64 {
	return m.cfg.LambdaT/(1+math.Exp(-float64(age)/float64(m.cfg.Capacity))) +
		m.cfg.LambdaU*uncertainty/math.Log(float64(m.cfg.Classes))
}

// Add inserts a sample of pseudo-label class with the given uncertainty
// ([H] CSTU.add_instance) and ages the memory; it reports whether the
// sample was kept.
func (m *RoTTAMemory[T]) Add(data T, class int, uncertainty float64) (bool, error) {
	if class < 0 || class >= m.cfg.Classes {
		return false, fmt.Errorf("feature: rotta: class %d of %d", class, m.cfg.Classes)
	}
	if math.IsNaN(uncertainty) || math.IsInf(uncertainty, 0) {
		return false, fmt.Errorf("feature: rotta: uncertainty %g is not finite", uncertainty)
	}
	score := m.Score(0, uncertainty)
	var kept bool
	switch {
	case float64(len(m.classes[class])) < m.perClass && m.Len() < m.cfg.Capacity:
		kept = true
	case float64(len(m.classes[class])) < m.perClass:
		kept = m.evict(m.majority(), score)
	default:
		kept = m.evict([]int{class}, score)
	}
	if kept {
		m.classes[class] = append(m.classes[class], RoTTAItem[T]{Data: data, Class: class, Uncertainty: uncertainty})
	}
	for _, l := range m.classes {
		for i := range l {
			l[i].Age++
		}
	}
	return kept, nil
}

// majority lists the classes holding the most items.
func (m *RoTTAMemory[T]) majority() []int {
	most := 0
	for _, l := range m.classes {
		most = max(most, len(l))
	}
	var out []int
	for y, l := range m.classes {
		if len(l) == most {
			out = append(out, y)
		}
	}
	return out
}

// evict removes the item of highest score in the classes (the last of
// equal ones) if it scores above base, and reports whether room was made;
// with no items there is room.
func (m *RoTTAMemory[T]) evict(classes []int, base float64) bool {
	bestClass, bestIndex, best := -1, -1, math.Inf(-1)
	for _, y := range classes {
		for i, it := range m.classes[y] {
			if s := m.Score(it.Age, it.Uncertainty); bestClass < 0 || s >= best {
				bestClass, bestIndex, best = y, i, s
			}
		}
	}
	if bestClass < 0 {
		return true
	}
	if !(best > base) {
		return false
	}
	m.classes[bestClass] = slices.Delete(m.classes[bestClass], bestIndex, bestIndex+1)
	return true
}

// Items returns the items in the code's get_memory order (class-major,
// insertion order within a class), for the update's batch and for saving.
func (m *RoTTAMemory[T]) Items() []RoTTAItem[T] {
	var out []RoTTAItem[T]
	for _, l := range m.classes {
		out = append(out, l...)
	}
	return out
}

// Ages returns the items' ages divided by the capacity, in Items' order:
// the a of the timeliness weights.
func (m *RoTTAMemory[T]) Ages() []float64 {
	var out []float64
	for _, l := range m.classes {
		for _, it := range l {
			out = append(out, float64(it.Age)/float64(m.cfg.Capacity))
		}
	}
	return out
}

// SetItems replaces the memory with items (as Items returned them; each
// class keeps its items' relative order), after checking that they fit
// the capacity, the classes and the quota; errors wrap ErrStateMismatch and
// leave the memory unchanged.
func (m *RoTTAMemory[T]) SetItems(items []RoTTAItem[T]) error {
	if len(items) > m.cfg.Capacity {
		return fmt.Errorf("%w: rotta: %d items, capacity %d", ErrStateMismatch, len(items), m.cfg.Capacity)
	}
	quota := int(math.Ceil(m.perClass))
	classes := make([][]RoTTAItem[T], m.cfg.Classes)
	for i, it := range items {
		if it.Class < 0 || it.Class >= m.cfg.Classes {
			return fmt.Errorf("%w: rotta: item %d of class %d, %d classes", ErrStateMismatch, i, it.Class, m.cfg.Classes)
		}
		if it.Age < 0 || math.IsNaN(it.Uncertainty) || math.IsInf(it.Uncertainty, 0) {
			return fmt.Errorf("%w: rotta: item %d has age %d, uncertainty %g", ErrStateMismatch, i, it.Age, it.Uncertainty)
		}
		if len(classes[it.Class]) == quota {
			return fmt.Errorf("%w: rotta: class %d holds more than its quota of %d items", ErrStateMismatch, it.Class, quota)
		}
		classes[it.Class] = append(classes[it.Class], it)
	}
	m.classes = classes
	return nil
}

// TimelinessWeights returns RoTTA's loss weight of every memory item,
// ω(a) = e^{−a}/(1 + e^{−a}) for its age a = age/capacity ([H]
// timeliness_reweighting): older items count less.
func TimelinessWeights(ages []float64) []float64 {
	out := make([]float64, len(ages))
	for i, a := range ages {
		out[i] = math.Exp(-a) / (1 + math.Exp(-a))
	}
	return out
}

// RoTTAPseudoLabels returns the teacher's pseudo-labels (argmax of its
// logits, B×C) and uncertainties −Σ p·log(p + 1e-6) with p = softmax
// ([H] RoTTA.forward_and_adapt).
func RoTTAPseudoLabels(logits mat.Matrix) (labels []int, uncertainty []float64) {
	b, c := logits.Dims()
	labels = Argmax(logits)
	uncertainty = make([]float64, b)
	p := make([]float64, c)
	for i := range b {
		for k := range c {
			p[k] = logits.At(i, k)
		}
		softmaxInPlace(p)
		var h float64
		for _, v := range p {
			h -= v * math.Log(v+1e-6)
		}
		uncertainty[i] = h
	}
	return labels, uncertainty
}

// SoftCrossEntropyResult is SoftCrossEntropy's output.
type SoftCrossEntropyResult struct {
	CE     []float64  // per row, −Σ softmax(teacher)·log_softmax(student)
	Loss   float64    // mean over rows of weight·CE
	DLdS   *mat.Dense // ∂Loss/∂student (B×C)
	Target *mat.Dense // softmax(teacher), the soft labels
}

// SoftCrossEntropy is RoTTA's loss on logits ([H] softmax_cross_entropy
// and the weighted mean of loss_calculation): with q_i = softmax(teacher_i)
// (no gradient: the teacher is the EMA model) and weights w,
//
//	L = (1/B) Σ_i w_i·CE_i,  CE_i = −Σ_k q_ik·log softmax(student_i)_k,
//	∂L/∂student_i = (w_i/B)·(softmax(student_i) − q_i).
//
// weights nil means 1 for every row.
func SoftCrossEntropy(student, teacher mat.Matrix, weights []float64) (*SoftCrossEntropyResult, error) {
	b, c := student.Dims()
	tb, tc := teacher.Dims()
	if b < 1 || c < 1 || tb != b || tc != c {
		return nil, fmt.Errorf("feature: soft cross-entropy: student logits %d×%d, teacher %d×%d", b, c, tb, tc)
	}
	if weights != nil && len(weights) != b {
		return nil, fmt.Errorf("feature: soft cross-entropy: %d weights for %d rows", len(weights), b)
	}
	res := &SoftCrossEntropyResult{CE: make([]float64, b), DLdS: mat.NewDense(b, c, nil), Target: mat.NewDense(b, c, nil)}
	for i := range b {
		q := res.Target.RawRowView(i)
		for k := range c {
			q[k] = teacher.At(i, k)
		}
		softmaxInPlace(q)
		ls := make([]float64, c)
		for k := range c {
			ls[k] = student.At(i, k)
		}
		logSoftmaxInPlace(ls)
		w := 1.0
		if weights != nil {
			w = weights[i]
		}
		var ce float64
		g := res.DLdS.RawRowView(i)
		for k := range c {
			ce -= q[k] * ls[k]
			g[k] = w / float64(b) * (math.Exp(ls[k]) - q[k])
		}
		res.CE[i] = ce
		res.Loss += w * ce / float64(b)
	}
	return res, nil
}

// RoTTAResult is RoTTALoss's output.
type RoTTAResult struct {
	*SoftCrossEntropyResult
	Weights []float64  // the timeliness weights of the items
	Logits  *mat.Dense // the student's logits scale·normalize(F)·Tᵀ
	DLdF    *mat.Dense // ∂Loss/∂F (B×d)
}

// RoTTALoss is RoTTA's update loss at the level of features: the student's
// unnormalised image features f (B×d) of the augmented memory batch give
// logits scale·normalize(f)·tᵀ with the text features t (C×d); the
// teacher's logits on the clean batch (B×C) are the soft labels, and the
// items' ages a = age/capacity give the weights (TimelinessWeights).
func RoTTALoss(f, t, teacher mat.Matrix, scale float64, ages []float64) (*RoTTAResult, error) {
	if err := checkFeatures(f, t, "rotta loss"); err != nil {
		return nil, err
	}
	b, _ := f.Dims()
	if len(ages) != b {
		return nil, fmt.Errorf("feature: rotta loss: %d ages for %d items", len(ages), b)
	}
	fn, norms := NormalizeRows(f)
	logits := Logits(fn, t, scale)
	w := TimelinessWeights(ages)
	sce, err := SoftCrossEntropy(logits, teacher, w)
	if err != nil {
		return nil, err
	}
	var dfn mat.Dense
	dfn.Mul(sce.DLdS, t)
	dfn.Scale(scale, &dfn)
	return &RoTTAResult{
		SoftCrossEntropyResult: sce,
		Weights:                w,
		Logits:                 logits,
		DLdF:                   normalizeRowsBackward(fn, norms, &dfn),
	}, nil
}

// EMAUpdate blends the student's parameters into the teacher's in place,
// teacher ← keep·teacher + (1 − keep)·student ([H] utils/misc.py
// ema_update_model; RoTTA's keep is 1 − ν = 0.999), computed in float64.
// The harness blends every parameter (update_all); only the trained ones
// change beyond rounding, so a caller may pass those alone (spec
// correction 5).
func EMAUpdate[T ~float32 | ~float64](teacher, student []T, keep float64) error {
	if len(teacher) != len(student) {
		return fmt.Errorf("feature: ema: teacher has %d values, student %d", len(teacher), len(student))
	}
	if !(keep >= 0 && keep <= 1) {
		return fmt.Errorf("feature: ema: weight %g on the teacher must be in [0, 1]", keep)
	}
	for i, s := range student {
		teacher[i] = T(keep*float64(teacher[i]) + (1-keep)*float64(s))
	}
	return nil
}
