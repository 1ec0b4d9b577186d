package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/online"
	"github.com/subtta/subtta/weights"
)

// Config is everything that defines an evaluation run. Its JSON form is
// the "config" section of run.json and results.json, which ReadConfig
// reads back (as it reads a JSON or YAML file with the same keys); the
// YAML file of `subtta eval --config` is keyed by the command's flags
// instead. Zero values mean the defaults noted per field.
type Config struct {
	// Model is the checkpoint: .safetensors, .pt or a Hugging Face folder;
	// or a name registered with clip.RegisterModel, such as "default"
	// (builtin.ModelName) once package builtin is imported.
	Model string `json:"model"`
	// ModelConfig, if set, is a file with the model's architecture (see
	// weights.ParseConfig), for checkpoints that do not store one.
	ModelConfig string `json:"model_config,omitempty"`
	// Arch, if set, names the model's architecture among open_clip's
	// (weights.Arch), in place of ModelConfig.
	Arch string `json:"arch,omitempty"`
	// Vocab is the CLIP BPE vocabulary (see textenc.LoadBPETokenizer).
	// When empty, byte-level models need none and a model folder holding
	// one gives its own (clip.Spec.Vocab); the CLI also finds or downloads
	// one.
	Vocab string `json:"vocab,omitempty"`

	// Dataset is the benchmark: "cifar10-c", "cifar100-c" or "imagenet-c";
	// or "imagenet-r", "imagenet-a" or "imagenet-k" (ImageNet-Sketch), one
	// domain each with ImageNet-C's presets (data.OpenImageNetVariant).
	// It picks the presets (tta.Lookup) and the corruption parameters.
	Dataset string `json:"dataset"`
	// Data is where the images are: the benchmark's own files (the folder of
	// CIFAR-10-C's .npy files, or ImageNet-C's corruption folders), or a
	// clean test set that is then corrupted on the fly (CIFAR binaries as
	// .tar.gz or folder, an image-folder tree as folder, .tar or .tar.gz).
	Data string `json:"data"`
	// Labels is a folder of class-name and template files laid out as
	// data.ReadLabels expects; empty means the dataset's own class names
	// (CIFAR binaries, class folders) or, for CIFAR-10, the built-in ones.
	Labels string `json:"labels,omitempty"`
	// SubsetList restricts ImageNet(-C) to a list of "<wnid>/<file>" lines,
	// such as robustbench's 5,000-image list.
	SubsetList string `json:"subset_list,omitempty"`

	// Methods are registered method names (tta.Methods); default
	// DefaultMethods, ["source", "subtta-m"].
	Methods []string `json:"methods"`
	// Corruptions default to all 15, in the benchmark's order; Clean adds
	// the uncorrupted images as one domain.
	Corruptions []string `json:"corruptions"`
	// Severities default to [5].
	Severities []int `json:"severities"`

	// MethodOptions set method options by name (tta.Preset.Set), under a
	// method's or a family's name (see MethodOptions): SubTTA's rank, α,
	// switches, each method's learning rate and optimizer.
	MethodOptions MethodOptions `json:"method_options,omitempty"`
	// Templates, if given, replace every method's prompt templates: each
	// entry a template with "{}" or the name of a set (tta.TemplateSet:
	// cifar-ensemble, imagenet-ensemble, t0 … t7, ...).
	Templates []string `json:"templates,omitempty"`
	// Classes > 0 restricts the run to that many classes, drawn with
	// ClassSeed (DrawClasses); ClassNames names them instead. The head and
	// the images are restricted together, labels renumbered.
	Classes    int      `json:"classes,omitempty"`
	ClassSeed  uint64   `json:"class_seed,omitempty"`
	ClassNames []string `json:"class_names,omitempty"`

	// Limit > 0 keeps the first Limit images of every domain's stream
	// (after shuffling).
	Limit int `json:"limit,omitempty"`
	// BatchSize > 0 overrides every preset's batch size.
	BatchSize int `json:"batch_size,omitempty"`
	// Views > 0 sets the number of views per image of every method (all
	// must be multi-view methods: tta.MultiView); 0 keeps each preset's.
	Views int `json:"views,omitempty"`
	// Protocol is "reset" (default: reset before every domain, the paper's),
	// "continual", "mixed", "episodic" (batch size 1, the weights reset
	// before every sample, the method's memory kept through the domain;
	// presets take their episodic form, tta.Preset.ForEpisodic) or
	// "gradual" (each corruption at severities 1…5…1, online.GradualSeverities,
	// with no reset; the way down is recorded as domains "c/s↓" of their
	// own).
	Protocol string `json:"protocol"`
	// Order is a file of sample indices (whitespace-separated, see
	// online.ReadOrder) giving the order of every stream in place of the
	// shuffle: each domain's (after class restriction), or the pool of
	// the mixed protocol; its length must be the stream's. For orders
	// made elsewhere, such as a Dirichlet label-shift order.
	Order string `json:"order,omitempty"`
	// NoShuffle streams each domain in index order instead of Python's
	// random.shuffle with Seed (the official protocol, seed 1).
	NoShuffle bool `json:"no_shuffle,omitempty"`
	// Seed is the shuffle seed: 1 in the official protocol, and the
	// default of the CLI and ReadConfig (the zero value is seed 0).
	Seed uint64 `json:"seed"`
	// CorruptSeed seeds on-the-fly corruptions (corrupt.NewSource).
	CorruptSeed uint64 `json:"corrupt_seed"`
	// FrostDir holds frost1.png … frost5.jpg, for frost on the fly.
	FrostDir string `json:"frost_dir,omitempty"`

	// Out is the results folder (default "subtta-results").
	Out string `json:"out"`
	// Plot writes PNG plots of accuracy and diagnostics into Out/plots.
	Plot bool `json:"plot,omitempty"`
	// Workers decode and preprocess images in parallel (default GOMAXPROCS).
	Workers int `json:"workers,omitempty"`

	// Precision is the arithmetic of the model's linear layers in passes
	// without gradients (clip.Spec.Precision: Source, TDA, the views of
	// multi-view methods that train nothing on them); adaptation's passes
	// stay fp32. Run sets it on the model, and it is part of the run's
	// identity: a folder of fp32 results is not resumed in int8. The zero
	// value is fp32.
	Precision kernel.Precision `json:"precision,omitempty"`

	// Shard, when set, computes only this shard's units of the run
	// (SplitShards), into a folder of its own; Merge joins the shards.
	Shard *Shard `json:"shard,omitempty"`
}

// Clean, given as a corruption, is the uncorrupted test set: one domain,
// named "clean", whatever the severities.
const Clean = "clean"

// DefaultMethods are run when Config.Methods is empty: the default of a
// run given its own data (`subtta eval --data`). The command's run on its
// built-in images, with no flags, uses its own list instead (source, tent,
// subtta-m).
var DefaultMethods = []string{"source", "subtta-m"}

// ReadConfig reads a config file, JSON or (named .yaml or .yml) YAML with
// the same keys: a Config, or a file eval writes (run.json, results.json),
// whose "config" member is then read, so that a finished or interrupted run
// can be repeated with `--config OUT/run.json`. Keys it lacks keep their
// zero value, except seed and corrupt_seed, which default to 1 as on the
// command line. Unknown keys are an error, so that a misspelt option is not
// silently ignored.
func ReadConfig(path string) (Config, error) {
	c := Config{Seed: 1, CorruptSeed: 1}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("eval: config: %w", err)
	}
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
		// YAML becomes JSON, read by the same strict decoder.
		if b, err = yaml.YAMLToJSON(b); err != nil {
			return c, fmt.Errorf("eval: config %s: %w", path, err)
		}
	}
	if inner, ok := writtenConfig(b); ok {
		b = inner
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("eval: config %s: %w", path, err)
	}
	return c, nil
}

// writtenConfig returns the "config" member of a run.json or results.json:
// a JSON object with no member that neither file has.
func writtenConfig(b []byte) ([]byte, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil || top["config"] == nil {
		return nil, false
	}
	run := []string{"identity", "config", "classes"}
	results := []string{"config", "command", "started", "finished", "seconds", "methods", "records", "diagnostics", "environment", "builds"}
	for k := range top {
		if !slices.Contains(run, k) && !slices.Contains(results, k) {
			return nil, false
		}
	}
	return top["config"], true
}

// spec is the model c names, for clip.Create.
func (c Config) spec() clip.Spec {
	return clip.Spec{Model: c.Model, Arch: c.Arch, ModelConfig: c.ModelConfig, Vocab: c.Vocab, Precision: c.Precision}
}

// architecture returns the model architecture c gives (ModelConfig or
// Arch, read by clip.Spec.Architecture), or nil when the checkpoint's own
// is to be used.
func (c Config) architecture() (*weights.CLIPConfig, error) {
	a, err := c.spec().Architecture()
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	return a, nil
}

// withDefaults returns c with the defaults filled in, or an error naming the
// first bad field.
func (c Config) withDefaults() (Config, error) {
	if c.Model == "" {
		return c, fmt.Errorf("eval: no model given")
	}
	if c.Data == "" {
		return c, fmt.Errorf("eval: no data given")
	}
	if !slices.Contains(tta.PresetDatasets, c.Dataset) && !isVariant(c.Dataset) {
		return c, fmt.Errorf("eval: unknown dataset %q (want one of %s)", c.Dataset, strings.Join(append(slices.Clone(tta.PresetDatasets), data.ImageNetVariants...), ", "))
	}
	if len(c.Methods) == 0 {
		c.Methods = slices.Clone(DefaultMethods)
	}
	seen := map[string]bool{}
	for _, m := range c.Methods {
		if seen[m] {
			return c, fmt.Errorf("eval: method %q given twice", m)
		}
		seen[m] = true
		if _, err := c.preset(m); err != nil {
			return c, err
		}
	}
	if err := c.MethodOptions.check(c.Methods); err != nil {
		return c, err
	}
	switch {
	case c.Classes < 0:
		return c, fmt.Errorf("eval: classes %d must not be negative", c.Classes)
	case c.Classes == 1 || len(c.ClassNames) == 1:
		// One class is always right: its accuracy says nothing.
		return c, fmt.Errorf("eval: a run of one class is always right: keep at least 2 classes")
	case c.ClassSeed != 0 && c.Classes == 0:
		return c, fmt.Errorf("eval: class seed %d draws nothing without a number of classes to draw", c.ClassSeed)
	}
	if c.SubsetList != "" && c.Dataset != "imagenet-c" {
		return c, fmt.Errorf("eval: the subset list %s names ImageNet images (<wnid>/<file>): it applies to imagenet-c, not %s", c.SubsetList, c.Dataset)
	}
	if isVariant(c.Dataset) {
		// One domain, the test set itself.
		if len(c.Corruptions) > 0 && !slices.Equal(c.Corruptions, []string{c.Dataset}) {
			return c, fmt.Errorf("eval: %s has no corruptions (%s given): it is one domain", c.Dataset, strings.Join(c.Corruptions, ", "))
		}
		if c.Protocol == online.Gradual {
			return c, fmt.Errorf("eval: %s has no severities for the gradual protocol", c.Dataset)
		}
		c.Corruptions = []string{c.Dataset}
	}
	if len(c.Corruptions) == 0 {
		c.Corruptions = corrupt.Names()
	}
	seen = map[string]bool{}
	for _, n := range c.Corruptions {
		if _, err := corrupt.Lookup(n); err != nil && n != Clean && !isVariant(n) {
			return c, fmt.Errorf("eval: %w (or %s, the uncorrupted images)", err, Clean)
		}
		if seen[n] {
			return c, fmt.Errorf("eval: corruption %q given twice", n)
		}
		seen[n] = true
	}
	if len(c.Severities) == 0 {
		c.Severities = []int{5}
	}
	for i, s := range c.Severities {
		if s < 1 || s > 5 {
			return c, fmt.Errorf("eval: severity %d is not in 1…5", s)
		}
		if slices.Contains(c.Severities[:i], s) {
			return c, fmt.Errorf("eval: severity %d given twice", s)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"limit", c.Limit}, {"batch size", c.BatchSize}, {"workers", c.Workers}} {
		if f.v < 0 {
			return c, fmt.Errorf("eval: %s %d must not be negative", f.name, f.v)
		}
	}
	if c.Protocol == "" {
		c.Protocol = "reset"
	}
	proto, err := protocol(c.Protocol)
	if err != nil {
		return c, err
	}
	if c.Protocol == online.Gradual && !slices.Equal(c.Severities, []int{5}) {
		return c, fmt.Errorf("eval: the gradual protocol runs every corruption at severities %v: give no severities", online.GradualSeverities)
	}
	if proto == online.Episodic && c.BatchSize > 1 {
		return c, fmt.Errorf("eval: the episodic protocol adapts to one sample at a time: batch size %d, want 1 (or none)", c.BatchSize)
	}
	if c.Out == "" {
		c.Out = "subtta-results"
	}
	if c.Shard != nil {
		if err := c.Shard.check(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Check refuses a configuration Run would refuse before opening any
// input: an unknown dataset, method, corruption or protocol, a severity
// out of range or given twice, a method option out of its range, a
// negative limit, and the like; the error names the value. It reads no
// file: the inputs (model, data, ...) are checked by Run. A command line
// calls it to tell a bad flag value (a usage error) from a run that fails.
func (c Config) Check() error {
	_, err := c.withDefaults()
	return err
}

// preset is the one place a method's preset is resolved for this
// configuration: tta.Lookup, its episodic form under the episodic
// protocol, then BatchSize, Views, Templates and MethodOptions when set.
func (c Config) preset(method string) (tta.Preset, error) {
	p, err := tta.Lookup(c.Dataset, method)
	if err != nil {
		return p, fmt.Errorf("eval: %w", err)
	}
	if proto, _ := protocol(c.Protocol); proto == online.Episodic {
		if p, err = p.ForEpisodic(); err != nil {
			return p, fmt.Errorf("eval: %w", err)
		}
	}
	if c.BatchSize > 0 {
		p.BatchSize = c.BatchSize
	}
	if c.Views > 0 {
		if err := p.SetViews(c.Views); err != nil {
			return p, fmt.Errorf("eval: --views: %w", err)
		}
	}
	templates, err := c.resolveTemplates()
	if err != nil {
		return p, err
	}
	if templates != nil {
		if err := p.SetTemplates(templates); err != nil {
			return p, fmt.Errorf("eval: %w", err)
		}
	}
	if err := applyOptions(&p, c.MethodOptions.forMethod(method)); err != nil {
		return p, err
	}
	return p, nil
}

// protocol is the runner's protocol of a configuration's: the gradual
// protocol runs as the continual one over its sequence of severities
// (planDomains).
func protocol(name string) (online.Protocol, error) {
	if name == online.Gradual {
		return online.Continual, nil
	}
	p, err := online.ParseProtocol(name)
	if errors.Is(err, online.ErrUnknownProtocol) {
		return 0, fmt.Errorf("eval: %w %q (want %s)", online.ErrUnknownProtocol, name, strings.Join(Protocols, ", "))
	}
	if err != nil {
		return 0, fmt.Errorf("eval: %w", err)
	}
	return p, nil
}

// Protocols are the names Config.Protocol takes.
var Protocols = []string{"reset", "continual", "mixed", "episodic", online.Gradual}

// perDomain reports whether a protocol runs each domain as a stream of
// its own (reset, episodic), checkpointed and stored domain by domain.
func perDomain(p online.Protocol) bool { return p == online.ResetEachDomain || p == online.Episodic }

// isVariant reports whether dataset is an ImageNet variant without
// corruptions (data.ImageNetVariants).
func isVariant(dataset string) bool { return slices.Contains(data.ImageNetVariants, dataset) }

// WrittenConfig returns the "config" member of b, a config file's
// contents, when b is a file eval writes (run.json, results.json), which
// ReadConfig reads by that member, rather than a Config.
func WrittenConfig(b []byte) (config []byte, ok bool) { return writtenConfig(b) }
