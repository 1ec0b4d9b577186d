package serve

import (
	"math"
	"strings"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/feature"
)

// heads are the zero-shot heads of one set of labels and templates: the
// ensemble head (C×d, unit rows), with the per-template heads when the
// preset asks for them (WATT), and the text subspace the principal angles
// are measured against (made on first use). They are built by
// clip.Model.ZeroShotHead (through tta.Preset.Heads), the builder of subtta
// classify too, and the cache below is the only one that keeps them.
type heads struct {
	tta.Heads

	textOnce sync.Once
	text     *feature.TextSubspace
}

// headCache keeps the heads of the most recently used label sets: building
// one runs the text tower on every label in every template. Requests that
// miss on the same key wait for one build.
type headCache struct {
	srv   *Server
	max   int
	mu    sync.Mutex
	clock int64
	m     map[string]*headEntry
}

type headEntry struct {
	ready chan struct{} // closed when h or err is set
	h     *heads
	err   error
	used  int64
}

func newHeadCache(s *Server, max int) *headCache {
	return &headCache{srv: s, max: max, m: map[string]*headEntry{}}
}

// get returns the heads of labels and templates; perTemplate adds one head
// per template. The text tower is never written, so no lock is needed to
// run it.
func (c *headCache) get(labels, templates []string, perTemplate bool) (*heads, error) {
	key := strings.Join(labels, "\x00") + "\x01" + strings.Join(templates, "\x00")
	if perTemplate {
		key += "\x01per-template"
	}
	c.mu.Lock()
	c.clock++
	if e, ok := c.m[key]; ok {
		e.used = c.clock
		c.mu.Unlock()
		<-e.ready
		return e.h, e.err
	}
	if len(c.m) >= c.max {
		var oldest string
		var used int64 = -1
		for k, e := range c.m {
			if isClosed(e.ready) && (used < 0 || e.used < used) {
				oldest, used = k, e.used
			}
		}
		delete(c.m, oldest)
	}
	e := &headEntry{ready: make(chan struct{}), used: c.clock}
	c.m[key] = e
	c.mu.Unlock()

	p := c.srv.preset
	p.Templates, p.PerTemplateHeads = templates, perTemplate
	th, err := p.Heads(c.srv.cfg.Model, c.srv.cfg.Tokenizer, labels)
	if err != nil {
		e.err = err
		c.mu.Lock()
		delete(c.m, key) // not kept: the next request tries again
		c.mu.Unlock()
	} else {
		e.h = &heads{Heads: th}
	}
	close(e.ready)
	return e.h, e.err
}

// subspace returns the text subspace of the head for the principal-angle
// diagnostics, with SubTTA's preset options for the dataset (as subtta
// eval measures them), or nil when there is none (one class).
func (h *heads) subspace(dataset string) *feature.TextSubspace {
	h.textOnce.Do(func() {
		opt, err := tta.SubspaceOptions(dataset)
		if err != nil {
			return
		}
		h.text, _ = feature.NewTextSubspace(h.Head, opt)
	})
	return h.text
}

// frozenLogits is the frozen model's answer for one image's features
// (1×d): clip.ZeroShotLogits, the scorer of subtta classify, whose logits
// are also the source method's, and their first largest.
func (h *heads) frozenLogits(f *mat.Dense, scale float64) ([]float64, int) {
	logits := clip.ZeroShotLogits(f, h.Head, scale).RawRowView(0)
	pred, best := 0, math.Inf(-1)
	for j, v := range logits {
		if v > best {
			pred, best = j, v
		}
	}
	return logits, pred
}
