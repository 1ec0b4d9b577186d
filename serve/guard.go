package serve

// This file is the collapse guard: a stream whose adaptation degenerates is
// put back to the source weights. Continual test-time adaptation is known to
// collapse on long streams (the adapted LayerNorms drift until the model
// predicts one class, or nothing with confidence), and a client, or an
// attacker who can send into a stream, can steer it there with its images.

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/subtta/subtta/tta"
)

// GuardConfig configures the collapse guard of streams. Its zero value is
// off: a stream adapts on whatever it is sent.
//
// A batch is bad when one of the method's losses exceeds MaxLoss (or is not
// finite), or when its mean prediction entropy, as a share of the entropy
// of a uniform prediction (0: certain, 1: no preference), exceeds
// MaxEntropy. Patience bad batches in a row reset the stream; so does one
// label taking more than MaxClassShare of the stream's last Window
// predictions. A reset gives the stream a new Method: the source LayerNorm
// values, a fresh optimizer and every memory cleared (SubTTA's EMA
// covariance too, which tta.Method.Reset keeps), as a new stream would
// start; its counters and labels stay.
type GuardConfig struct {
	// MaxLoss bounds every loss the method reports (0: not checked).
	MaxLoss float64
	// MaxEntropy bounds a batch's mean prediction entropy, between 0 and
	// 1 (0: not checked).
	MaxEntropy float64
	// Patience is the number of bad batches in a row that reset a stream
	// (default 3).
	Patience int
	// MaxClassShare bounds the share of the last Window predictions one
	// label may take, between 0 and 1 (0: not checked).
	MaxClassShare float64
	// Window is the number of predictions MaxClassShare is taken over
	// (default five batches); the share is checked once the stream has
	// made that many since its last reset.
	Window int
}

// DefaultGuardPatience is GuardConfig.Patience's default.
const DefaultGuardPatience = 3

// On says whether the guard checks anything.
func (g GuardConfig) On() bool { return g.MaxLoss > 0 || g.MaxEntropy > 0 || g.MaxClassShare > 0 }

func (g *GuardConfig) defaults(batchSize int) error {
	for _, b := range []struct {
		name string
		v    float64
		max  float64
	}{{"MaxLoss", g.MaxLoss, math.Inf(1)}, {"MaxEntropy", g.MaxEntropy, 1}, {"MaxClassShare", g.MaxClassShare, 1}} {
		if !(b.v >= 0 && b.v <= b.max) {
			return fmt.Errorf("serve: Config.Guard.%s %v: want 0 (not checked) up to %v", b.name, b.v, b.max)
		}
	}
	if g.Patience < 0 || g.Window < 0 {
		return fmt.Errorf("serve: Config.Guard: Patience %d, Window %d: want 0 (the default) or more", g.Patience, g.Window)
	}
	if g.Patience == 0 {
		g.Patience = DefaultGuardPatience
	}
	if g.Window == 0 {
		g.Window = 5 * batchSize
	}
	return nil
}

// Reasons of a guard's reset, as GET /v1/streams/{id} and the metrics
// name them.
const (
	GuardLoss       = "loss"
	GuardEntropy    = "entropy"
	GuardClassShare = "class_share"
)

// guardStats are the guard's record of a stream, saved with its counters.
type guardStats struct {
	BadRun     int   // bad batches in a row
	Recent     []int // the last Window predictions, oldest first
	Resets     int64
	LastReset  time.Time
	LastReason string
}

// GuardStatus is the guard's part of GET /v1/streams/{id}, when the guard
// is on.
type GuardStatus struct {
	Resets     int64      `json:"resets"`
	LastReset  *time.Time `json:"last_reset,omitempty"`
	LastReason string     `json:"last_reason,omitempty"`
	// BadBatches are the bad batches in a row so far.
	BadBatches int `json:"bad_batches"`
	// TopClassShare is the most frequent label's share of the predictions
	// in the window, and Predictions their number.
	TopClassShare float64 `json:"top_class_share"`
	Predictions   int     `json:"predictions"`
}

func (g guardStats) status() *GuardStatus {
	st := &GuardStatus{Resets: g.Resets, LastReason: g.LastReason, BadBatches: g.BadRun, Predictions: len(g.Recent)}
	if !g.LastReset.IsZero() {
		t := g.LastReset
		st.LastReset = &t
	}
	st.TopClassShare, _ = topShare(g.Recent)
	return st
}

// topShare is the share of the most frequent value of preds, and the value.
func topShare(preds []int) (float64, int) {
	if len(preds) == 0 {
		return 0, -1
	}
	count := map[int]int{}
	best := preds[0]
	for _, p := range preds {
		count[p]++
		if count[p] > count[best] {
			best = p
		}
	}
	return float64(count[best]) / float64(len(preds)), best
}

// meanEntropy is the mean entropy of the rows' softmax, as a share of
// log(columns).
func meanEntropy(res *tta.Result) float64 {
	n, c := res.Logits.Dims()
	if n == 0 || c < 2 {
		return 0
	}
	var sum float64
	for i := range n {
		row := res.Logits.RawRowView(i)
		m := slices.Max(row)
		var z float64
		for _, v := range row {
			z += math.Exp(v - m)
		}
		var h float64
		for _, v := range row {
			p := math.Exp(v-m) / z
			if p > 0 {
				h -= p * math.Log(p)
			}
		}
		sum += h
	}
	return sum / float64(n) / math.Log(float64(c))
}

// check records a stepped batch in a stream's guard record and returns why the
// stream must be reset ("" when not). The caller holds st.mu.
func (g GuardConfig) check(gs *guardStats, res *tta.Result) (reason, detail string) {
	bad := ""
	if g.MaxLoss > 0 {
		for name, v := range res.Diag.Losses {
			if math.IsNaN(v) || math.IsInf(v, 0) || v > g.MaxLoss {
				bad, detail = GuardLoss, fmt.Sprintf("loss %s %.4g beyond %.4g", name, v, g.MaxLoss)
				break
			}
		}
	}
	if bad == "" && g.MaxEntropy > 0 {
		if h := meanEntropy(res); !(h <= g.MaxEntropy) {
			bad, detail = GuardEntropy, fmt.Sprintf("mean prediction entropy %.3f of the uniform's, beyond %.3f", h, g.MaxEntropy)
		}
	}
	if bad != "" {
		gs.BadRun++
	} else {
		gs.BadRun = 0
	}
	if gs.BadRun >= g.Patience {
		return bad, fmt.Sprintf("%d bad batches in a row, the last: %s", gs.BadRun, detail)
	}
	if g.MaxClassShare > 0 {
		gs.Recent = append(gs.Recent, res.Preds...)
		if k := len(gs.Recent) - g.Window; k > 0 {
			gs.Recent = slices.Delete(gs.Recent, 0, k)
		}
		if len(gs.Recent) == g.Window {
			if share, label := topShare(gs.Recent); share > g.MaxClassShare {
				return GuardClassShare, fmt.Sprintf("label %d took %.0f%% of the last %d predictions, beyond %.0f%%", label, 100*share, g.Window, 100*g.MaxClassShare)
			}
		}
	}
	return "", ""
}

// guard checks a stepped batch and, when the stream's adaptation has
// degenerated, resets the stream to the source weights with a new Method.
// Only the stream's worker calls it, after the step and before the save,
// so that the state saved is the reset one. The batch's answers are its
// step's. When the save then finds the stream saved by another server
// since (errStale), the reset goes with the step: the stream is reloaded,
// and the batch stepped and checked again (the metric keeps the reset
// undone).
func (s *Server) guard(st *stream, res *tta.Result) {
	g := s.cfg.Guard
	if !g.On() {
		return
	}
	st.mu.Lock()
	reason, detail := g.check(&st.stats.Guard, res)
	st.mu.Unlock()
	if reason == "" {
		return
	}
	m, err := s.newMethod(st.heads)
	if err != nil {
		s.log.Error("serve: guard: building a new method to reset the stream: it goes on as it was", "stream", st.id, "err", err)
		return
	}
	s.model.Lock() // the model holds the source values at rest
	var state []byte
	if s.cfg.StateDir != "" {
		state, err = m.MarshalBinary()
	}
	if err == nil {
		st.method, st.params, st.state = m, slices.Clone(s.source), state
	}
	s.model.Unlock()
	if err != nil {
		s.log.Error("serve: guard: saving the reset stream's state: it goes on as it was", "stream", st.id, "err", err)
		return
	}
	st.mu.Lock()
	gs := &st.stats.Guard
	gs.BadRun, gs.Recent = 0, nil
	gs.Resets++
	gs.LastReset, gs.LastReason = time.Now().UTC(), reason
	st.mu.Unlock()
	s.m.guardResets.WithLabelValues(reason).Inc()
	s.log.Warn("serve: guard: stream reset to the source weights", "stream", st.id, "reason", reason, "detail", detail)
}
