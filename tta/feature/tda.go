package feature

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"gonum.org/v1/gonum/mat"
)

// TDACacheConfig configures one of TDA's caches.
type TDACacheConfig struct {
	// Disabled turns the cache off.
	Disabled bool
	// Shots is the capacity per class (shot_capacity).
	Shots int
	// Alpha weighs the cache logits, Beta sharpens the affinity:
	// α·exp(−β·(1 − z·k)).
	Alpha, Beta float64
}

// TDAConfig configures TDA ([T] kdiAAA/TDA tda_runner.py). The defaults
// (DefaultTDAConfig) are [T] configs/imagenet.yaml.
type TDAConfig struct {
	Positive TDACacheConfig
	Negative TDACacheConfig
	// EntropyLower and EntropyUpper bound the normalised entropy of the
	// samples admitted to the negative cache (strictly inside).
	EntropyLower, EntropyUpper float64
	// MaskLower and MaskUpper bound the probabilities that become a
	// negative entry's value (strictly inside): its mask is 1 there, 0
	// elsewhere.
	MaskLower, MaskUpper float64
	// Scale multiplies the cosine logits: a literal 100 in the code. For
	// NewTDA, 0 means the model's logit scale.
	Scale float64
	// PredictBeforeUpdate predicts every sample from the caches as they
	// were before it arrived. The code (and the default) admits the sample
	// to the caches first and then predicts, so a sample always sees itself
	// in the positive cache.
	PredictBeforeUpdate bool
}

// DefaultTDAConfig returns [T] configs/imagenet.yaml: positive cache 3
// shots per class, α 2, β 5; negative cache 2 shots, α 0.117, β 1, entropy
// band (0.2, 0.5), mask (0.03, 1); scale 100.
func DefaultTDAConfig() TDAConfig {
	return TDAConfig{
		Positive:     TDACacheConfig{Shots: 3, Alpha: 2, Beta: 5},
		Negative:     TDACacheConfig{Shots: 2, Alpha: 0.117, Beta: 1},
		EntropyLower: 0.2, EntropyUpper: 0.5,
		MaskLower: 0.03, MaskUpper: 1,
		Scale: 100,
	}
}

func (c TDAConfig) validate() error {
	for _, cc := range []struct {
		name string
		c    TDACacheConfig
	}{{"positive", c.Positive}, {"negative", c.Negative}} {
		if !cc.c.Disabled && cc.c.Shots < 1 {
			return fmt.Errorf("feature: tda: %s cache of %d shots per class", cc.name, cc.c.Shots)
		}
	}
	if !(c.Scale > 0) {
		return fmt.Errorf("feature: tda: logit scale %g must be positive", c.Scale)
	}
	return nil
}

// tdaEntry is one cached sample: its normalised features (the key), the
// entropy of its zero-shot softmax, and for the negative cache the mask of
// its probabilities (the value).
type tdaEntry struct {
	key     []float64
	entropy float64
	mask    []float64
}

// TDACache is the Training-free Dynamic Adapter ([T] kdiAAA/TDA, spec §2.5)
// at the level of image features: a positive and a negative key-value cache
// of test features per pseudo-label. It processes samples one at a time in
// order (the code's batch size 1), so its output does not depend on how a
// stream is cut into batches.
//
// For every sample, with z = normalize(f), logits ℓ = Scale·z·Wᵀ, p =
// softmax(ℓ), ŷ = argmax ℓ, H = −Σ p·log p (nats) and the normalised
// entropy h = H/log₂(C) (the code divides nats by log₂ C):
//
//   - the positive cache of class ŷ admits (z, H): appended when it holds
//     fewer than Shots entries, else it replaces the entry of highest
//     entropy if H is strictly lower; entries stay sorted by entropy
//     (stable).
//   - if EntropyLower < h < EntropyUpper, the negative cache of ŷ admits
//     (z, H, m) by the same rule, where m_c = 1 if MaskLower < p_c <
//     MaskUpper and 0 otherwise.
//   - the logits are ℓ + Σ_pos α⁺·exp(−β⁺(1 − z·k))·onehot(class) −
//     Σ_neg α⁻·exp(−β⁻(1 − z·k))·m, over the cached entries k.
//
// By default the caches are updated before the prediction, as in the code
// (see TDAConfig.PredictBeforeUpdate): a sample that enters the positive
// cache adds α⁺·exp(0) = α⁺ to its own zero-shot class. The code computes
// the cache logits in fp16 on CUDA; this port in float64.
type TDACache struct {
	cfg      TDAConfig
	head     *mat.Dense
	pos, neg map[int][]tdaEntry
}

// NewTDACache returns TDA's caches, empty, over the head (C×d, unit rows).
func NewTDACache(head mat.Matrix, cfg TDAConfig) (*TDACache, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if c, d := head.Dims(); c < 1 || d < 1 {
		return nil, fmt.Errorf("feature: tda: empty head (%d×%d)", c, d)
	}
	t := &TDACache{cfg: cfg, head: mat.DenseCopyOf(head)}
	t.Reset()
	return t, nil
}

// Reset empties both caches (the code runs each dataset with new caches;
// here, each domain).
func (t *TDACache) Reset() {
	t.pos = map[int][]tdaEntry{}
	t.neg = map[int][]tdaEntry{}
}

// CacheSizes returns the number of entries in the positive and the
// negative cache.
func (t *TDACache) CacheSizes() (positive, negative int) {
	for _, e := range t.pos {
		positive += len(e)
	}
	for _, e := range t.neg {
		negative += len(e)
	}
	return positive, negative
}

// TDAResult is TDA's output for a batch of samples.
type TDAResult struct {
	Logits *mat.Dense // B×C, zero-shot plus cache logits
	Preds  []int      // argmax of Logits
	// ZeroShot are the zero-shot logits Scale·normalize(F)·Wᵀ, ZeroShotPreds
	// their argmax (the labels the caches were updated with), and Entropy
	// their normalised entropies H/log₂(C).
	ZeroShot      *mat.Dense
	ZeroShotPreds []int
	Entropy       []float64
	// PosAdmitted and NegAdmitted count the samples the caches took in
	// (appended, or replacing an entry of higher entropy).
	PosAdmitted, NegAdmitted int
}

// Update runs TDA over the rows of f (B×d, unnormalised image features) in
// order, updating the caches after (or, with PredictBeforeUpdate, before)
// each sample's prediction.
func (t *TDACache) Update(f mat.Matrix) (*TDAResult, error) {
	if err := checkFeatures(f, t.head, "tda"); err != nil {
		return nil, err
	}
	b, _ := f.Dims()
	c, _ := t.head.Dims()
	z, _ := NormalizeRows(f)
	zs := Logits(z, t.head, t.cfg.Scale)
	res := &TDAResult{
		Logits:        mat.NewDense(b, c, nil),
		ZeroShot:      zs,
		ZeroShotPreds: Argmax(zs),
		Entropy:       make([]float64, b),
	}
	maxEnt := math.Log2(float64(c))
	for i := range b {
		zi := z.RawRowView(i)
		logp := slices.Clone(zs.RawRowView(i))
		logSoftmaxInPlace(logp)
		prob := make([]float64, c)
		var h float64
		for k, lp := range logp {
			prob[k] = math.Exp(lp)
			h -= prob[k] * lp
		}
		res.Entropy[i] = h / maxEnt
		y := res.ZeroShotPreds[i]
		update := func() {
			if !t.cfg.Positive.Disabled {
				var kept bool
				t.pos[y], kept = admit(t.pos[y], tdaEntry{key: slices.Clone(zi), entropy: h}, t.cfg.Positive.Shots)
				if kept {
					res.PosAdmitted++
				}
			}
			if e := res.Entropy[i]; !t.cfg.Negative.Disabled && t.cfg.EntropyLower < e && e < t.cfg.EntropyUpper {
				mask := make([]float64, c)
				for k, p := range prob {
					if t.cfg.MaskLower < p && p < t.cfg.MaskUpper {
						mask[k] = 1
					}
				}
				var kept bool
				t.neg[y], kept = admit(t.neg[y], tdaEntry{key: slices.Clone(zi), entropy: h, mask: mask}, t.cfg.Negative.Shots)
				if kept {
					res.NegAdmitted++
				}
			}
		}
		if !t.cfg.PredictBeforeUpdate {
			update()
		}
		out := res.Logits.RawRowView(i)
		copy(out, zs.RawRowView(i))
		if !t.cfg.Positive.Disabled {
			t.cacheLogits(out, zi, t.pos, t.cfg.Positive, 1)
		}
		if !t.cfg.Negative.Disabled {
			t.cacheLogits(out, zi, t.neg, t.cfg.Negative, -1)
		}
		if t.cfg.PredictBeforeUpdate {
			update()
		}
	}
	res.Preds = Argmax(res.Logits)
	return res, nil
}

// admit is the code's update_cache: the entry is appended below capacity,
// or replaces the last (highest-entropy) entry when its entropy is strictly
// lower, or is dropped; the list is then sorted by entropy, stably. kept
// reports whether the entry went in.
func admit(list []tdaEntry, e tdaEntry, shots int) (out []tdaEntry, kept bool) {
	switch {
	case len(list) < shots:
		list, kept = append(list, e), true
	case e.entropy < list[len(list)-1].entropy:
		list[len(list)-1], kept = e, true
	}
	sort.SliceStable(list, func(a, b int) bool { return list[a].entropy < list[b].entropy })
	return list, kept
}

// cacheLogits adds sign·α·Σ exp(−β(1 − z·k))·value to out over the cache,
// classes in ascending order (the code's summation order).
func (t *TDACache) cacheLogits(out, z []float64, cache map[int][]tdaEntry, cfg TDACacheConfig, sign float64) {
	classes := make([]int, 0, len(cache))
	for y := range cache {
		classes = append(classes, y)
	}
	slices.Sort(classes)
	for _, y := range classes {
		for _, e := range cache[y] {
			w := sign * cfg.Alpha * math.Exp(-cfg.Beta*(1-dot(z, e.key)))
			if e.mask == nil {
				out[y] += w
				continue
			}
			for k, m := range e.mask {
				out[k] += w * m
			}
		}
	}
}

// TDAEntry is one cached sample as Entries returns it: its normalised
// features, the entropy of its zero-shot softmax, and for the negative
// cache its mask.
type TDAEntry struct {
	Key     []float64
	Entropy float64
	Mask    []float64
}

// Entries returns the positive and negative caches, one list per class
// in cache order, for saving.
func (t *TDACache) Entries() (positive, negative [][]TDAEntry) {
	classes, _ := t.head.Dims()
	list := func(c map[int][]tdaEntry) [][]TDAEntry {
		out := make([][]TDAEntry, classes)
		for y, es := range c {
			for _, e := range es {
				out[y] = append(out[y], TDAEntry{Key: e.key, Entropy: e.entropy, Mask: e.mask})
			}
		}
		return out
	}
	return list(t.pos), list(t.neg)
}

// SetEntries replaces both caches with what Entries returned, after
// checking that every list fits the head and the shots per class; on an
// error nothing changes.
func (t *TDACache) SetEntries(positive, negative [][]TDAEntry) error {
	c, d := t.head.Dims()
	load := func(in [][]TDAEntry, shots int, masks bool) (map[int][]tdaEntry, error) {
		if len(in) != c {
			return nil, fmt.Errorf("feature: tda: saved caches of %d classes, the head has %d", len(in), c)
		}
		out := map[int][]tdaEntry{}
		for y, es := range in {
			if len(es) > shots {
				return nil, fmt.Errorf("feature: tda: saved cache of class %d holds %d entries, more than %d shots", y, len(es), shots)
			}
			for _, e := range es {
				if len(e.Key) != d || masks && len(e.Mask) != c {
					return nil, fmt.Errorf("feature: tda: saved cache entry of class %d does not fit %d classes × %d dims", y, c, d)
				}
				out[y] = append(out[y], tdaEntry{key: e.Key, entropy: e.Entropy, mask: e.Mask})
			}
		}
		return out, nil
	}
	pos, err := load(positive, t.cfg.Positive.Shots, false)
	if err != nil {
		return err
	}
	neg, err := load(negative, t.cfg.Negative.Shots, true)
	if err != nil {
		return err
	}
	t.pos, t.neg = pos, neg
	return nil
}
