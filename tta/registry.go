package tta

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/subtta/subtta/data"
)

// Errors of the registry, for errors.Is.
var (
	// ErrUnknownMethod: no registered method has the name.
	ErrUnknownMethod = errors.New("tta: unknown method")
	// ErrUnknownDataset: the dataset is not one of PresetDatasets, or the
	// method has no setting for it.
	ErrUnknownDataset = errors.New("tta: unknown dataset")
)

// A Registration is one method of the registry: its name, its preset for
// each dataset and its constructor. Each method's file holds its own
// registration; Register adds one.
type Registration struct {
	Name string
	// About is a one-line description for help texts.
	About string
	// Preset fills in the method's settings for p.Dataset. p arrives with
	// the dataset's defaults (DatasetDefaults: the batch size, the single
	// template "a photo of a {}.") and its Method set. It returns an error
	// wrapping ErrUnknownDataset when the method has no setting for the
	// dataset.
	Preset func(p *Preset) error
	// New builds the method from a preset Preset filled in and its heads.
	New func(m Model, p Preset, h Heads) (Method, error)
	// MinClasses, when set, is the fewest classes the method adapts with
	// under a filled-in preset and why; 2 otherwise.
	MinClasses func(p Preset) (int, string)
	// Options are the method's settings that Preset.Set changes by name
	// (the batch size is every method's and is not listed here).
	Options []Option
	// Episodic, when set, adapts a filled-in preset to the episodic
	// protocol beyond its batch size of 1 (SubTTA turns its feature bank
	// on); see Preset.ForEpisodic.
	Episodic func(p *Preset)
	// Cost is the expected cost per image of the method under a filled-in
	// preset, in forward passes of the vision tower (CostForward,
	// CostForwardBackward): what a sharded evaluation balances its shards
	// by (Preset.Cost). Every registration states it.
	Cost func(p Preset) float64
	// Carries, when set, reports whether the method built from a
	// filled-in preset keeps state through Reset: whether its
	// MarshalCarried returns non-nil (SubTTA's EMA covariance). A method
	// that carries state runs its domains in order, in one process, even
	// when an evaluation is sharded (Preset.Carries). Nil means it never
	// does.
	Carries func(p Preset) bool
}

// Costs of the vision tower per image, in forward passes, for
// Registration.Cost. A pass with a tape and a backward pass weighs
// CostForwardBackward, 2.03, the ratio of forward to forward+backward
// images/s of ViT-B/32 measured by `subtta bench` (18.88 and 9.31
// images/s, docs/performance.md, Ice Lake). A multi-view method runs
// every view through the tower: VTE's 64 views measured 66.8 forward
// passes (24.72 against 0.37 images/s, Zen 4, docs/performance.md), so a
// view counts as one pass.
const (
	CostForward         = 1.0
	CostForwardBackward = 2.03
)

// fixedCost is the Cost of a method that costs c whatever its preset.
func fixedCost(c float64) func(Preset) float64 { return func(Preset) float64 { return c } }

// viewsCost is the Cost of a multi-view method that runs each of its
// views through the tower at cost c.
func viewsCost(c float64) func(Preset) float64 {
	return func(p Preset) float64 { return float64(max(p.Views, 1)) * c }
}

// builtinMethods are the methods of this package, in the order help texts
// list them. Adding a method is a file with its type, config and
// Registration, and one entry here.
var builtinMethods = []Registration{
	sourceMethod,
	tentMethod,
	batclipMethod,
	mintMethod, mintOfficialMethod,
	subttaMethod(LossSource), subttaMethod(LossTent), subttaMethod(LossBATCLIP), subttaMethod(LossMint),
	wattMethod("watt-s", 2, 5), wattMethod("watt-lite", 1, 2),
	tdaMethod,
	ecalpMethod,
	vteMethod, zeroMethod, dmnMethod, tptMethod, memoMethod,
	rottaMethod, stsMethod,
}

// registry holds each registration once: a Preset points at its entry.
var registry = struct {
	sync.RWMutex
	list []*Registration
}{list: func() []*Registration {
	out := make([]*Registration, len(builtinMethods))
	for i := range builtinMethods {
		out[i] = &builtinMethods[i]
	}
	return out
}()}

// Register adds a method to the registry. It refuses an empty name, a name
// already registered, and a registration without Preset, New or Cost.
func Register(r Registration) error {
	if r.Name == "" || r.Preset == nil || r.New == nil || r.Cost == nil {
		return fmt.Errorf("tta: register %q: a method needs a name, Preset, New and Cost", r.Name)
	}
	registry.Lock()
	defer registry.Unlock()
	for _, e := range registry.list {
		if e.Name == r.Name {
			return fmt.Errorf("tta: register: method %q is already registered", r.Name)
		}
	}
	registry.list = append(registry.list, &r)
	return nil
}

// Methods lists the registered method names, in registration order.
func Methods() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, len(registry.list))
	for i, r := range registry.list {
		out[i] = r.Name
	}
	return out
}

func registered(name string) (*Registration, error) {
	registry.RLock()
	defer registry.RUnlock()
	for _, r := range registry.list {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w %q (want one of %v)", ErrUnknownMethod, name, methodsLocked())
}

func methodsLocked() []string {
	out := make([]string, len(registry.list))
	for i, r := range registry.list {
		out[i] = r.Name
	}
	return out
}

// PresetDatasets are the datasets that presets are defined for.
var PresetDatasets = []string{"imagenet-c", "cifar10-c", "cifar100-c"}

// VariantDatasets are datasets without presets of their own that take
// another's: ImageNet-R, ImageNet-A and ImageNet-Sketch ("imagenet-k", the
// paper's ImageNet-K) take ImageNet-C's, as the paper runs them.
var VariantDatasets = func() map[string]string {
	m := map[string]string{}
	for _, d := range data.ImageNetVariants {
		m[d] = "imagenet-c"
	}
	return m
}()

// PresetDataset returns the dataset whose presets dataset takes: itself,
// or for a variant (VariantDatasets) the one it follows.
func PresetDataset(dataset string) string {
	if d, ok := VariantDatasets[dataset]; ok {
		return d
	}
	return dataset
}

// DatasetDefaults returns the preset every method starts from on a
// dataset: the official SubTTA code's batch size (64 on ImageNet-C, 200 on
// CIFAR) and its single template "a photo of a {}.".
func DatasetDefaults(dataset string) (Preset, error) {
	dataset = PresetDataset(dataset)
	batch := map[string]int{"imagenet-c": 64, "cifar10-c": 200, "cifar100-c": 200}[dataset]
	if batch == 0 {
		return Preset{}, fmt.Errorf("%w %q (want one of %v)", ErrUnknownDataset, dataset, PresetDatasets)
	}
	return Preset{Dataset: dataset, BatchSize: batch, Templates: []string{"a photo of a {}."}}, nil
}

// Lookup returns the preset of a registered method for a dataset (for a
// variant, VariantDatasets, the preset of the dataset it follows, whose
// name the preset carries). The error wraps ErrUnknownMethod or
// ErrUnknownDataset.
func Lookup(dataset, method string) (Preset, error) {
	r, err := registered(method)
	if err != nil {
		return Preset{}, err
	}
	p, err := DatasetDefaults(dataset)
	if err != nil {
		return Preset{}, err
	}
	p.Method, p.reg = method, r
	if err := r.Preset(&p); err != nil {
		return Preset{}, err
	}
	return p, nil
}

// noSetting is the error of a method without a setting for a dataset.
func noSetting(method, dataset, why string) error {
	return fmt.Errorf("%w: %s has no %s setting (%s)", ErrUnknownDataset, method, dataset, why)
}

// Presets lists every dataset/method pair Lookup accepts, sorted by
// dataset, methods in registration order.
func Presets() []Preset {
	var out []Preset
	for _, d := range PresetDatasets {
		for _, m := range Methods() {
			if p, err := Lookup(d, m); err == nil {
				out = append(out, p)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Dataset < out[j].Dataset })
	return out
}
