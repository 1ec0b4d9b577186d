package pretrain

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/subtta/subtta/optim"
	"github.com/subtta/subtta/weights"
)

// Names of a run folder's files.
const (
	CheckpointFile = "checkpoint.safetensors" // weights, optimizer moments, step
	ModelFile      = "model.safetensors"      // the weights alone, loadable by clip.Load
	LogFile        = "log.jsonl"              // one record per epoch
)

// Prefixes of the optimizer moments' tensor names in a checkpoint.
const (
	expAvgPrefix   = "optimizer.exp_avg."
	expAvgSqPrefix = "optimizer.exp_avg_sq."
)

// progress is the part of a run's state that is not tensors: stored in the
// checkpoint's metadata as JSON.
type progress struct {
	Step int `json:"step"`
	// Sums over the steps of the current epoch so far, so that an epoch
	// interrupted and resumed logs the same figures.
	EpochLoss    float64 `json:"epoch_loss"`
	EpochCorrect int     `json:"epoch_correct"`
	EpochImages  int     `json:"epoch_images"`
	// Elapsed is the wall time of the processes that ran the run before, seconds.
	Elapsed float64 `json:"elapsed_s"`
	// OptimizerSteps is each parameter's Adam step count.
	OptimizerSteps map[string]int `json:"optimizer_steps"`
	// Untested, if not nil, is the record of the epoch the checkpoint
	// ends, trained but not yet tested nor logged: its test pass was
	// interrupted. Run tests and logs it before training on.
	Untested *EpochRecord `json:"untested_epoch,omitempty"`
	// legacyData is set when the checkpoint records no training set (one
	// written before DataIdentity): it was resumed unchecked.
	legacyData bool
}

// modelMetadata is the safetensors metadata of an exported model.
func (t *Trainer) modelMetadata() (map[string]string, error) {
	cj, err := json.Marshal(t.Config.Model)
	if err != nil {
		return nil, err
	}
	classes, err := json.Marshal(t.Config.Classes)
	if err != nil {
		return nil, err
	}
	templates, err := json.Marshal(t.Config.Templates)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"format":                  "pt",
		"layout":                  string(weights.LayoutOpenAI),
		"config":                  string(cj),
		"tokenizer":               "byte-level",
		"generator":               "github.com/subtta/subtta/pretrain",
		"step":                    strconv.Itoa(t.Step),
		weights.MetadataClasses:   string(classes),
		weights.MetadataTemplates: string(templates),
	}, nil
}

// SaveModel writes the weights as a safetensors file with OpenAI names and
// the configuration, class names and templates in its metadata (zstd-compressed when path ends in
// ".zst"), written atomically.
func (t *Trainer) SaveModel(path string) error {
	meta, err := t.modelMetadata()
	if err != nil {
		return err
	}
	var ts []weights.Tensor
	for _, p := range t.Params {
		ts = append(ts, weights.Tensor{Name: p.Name, DType: weights.F32, Shape: p.Shape, Data: p.Value.Data().F32()})
	}
	return weights.WriteFile(path, ts, meta)
}

// saveCheckpoint writes the weights, the optimizer moments and pr to path,
// atomically.
func (t *Trainer) saveCheckpoint(path string, pr progress) error {
	meta, err := t.modelMetadata()
	if err != nil {
		return err
	}
	tc, err := json.Marshal(t.Config)
	if err != nil {
		return err
	}
	meta[configMetadata] = string(tc)
	dj, err := json.Marshal(t.dataIdentity())
	if err != nil {
		return err
	}
	meta[dataMetadata] = string(dj)
	pr.Step = t.Step
	pr.OptimizerSteps = map[string]int{}
	var ts []weights.Tensor
	for _, p := range t.Params {
		ts = append(ts, weights.Tensor{Name: p.Name, DType: weights.F32, Shape: p.Shape, Data: p.Value.Data().F32()})
	}
	for _, st := range []optim.State[float32]{t.opt.State(), t.optPlain.State()} {
		for _, p := range t.Params {
			ps, ok := st[p.Name]
			if !ok {
				continue
			}
			pr.OptimizerSteps[p.Name] = ps.Step
			ts = append(ts,
				weights.Tensor{Name: expAvgPrefix + p.Name, DType: weights.F32, Shape: p.Shape, Data: ps.Buffers[optim.BufExpAvg]},
				weights.Tensor{Name: expAvgSqPrefix + p.Name, DType: weights.F32, Shape: p.Shape, Data: ps.Buffers[optim.BufExpAvgSq]})
		}
	}
	pj, err := json.Marshal(pr)
	if err != nil {
		return err
	}
	meta["progress"] = string(pj)
	return weights.WriteFile(path, ts, meta)
}

// configMetadata is the checkpoint's metadata key of the training
// settings (Config, as JSON): what makes a safetensors file a run's
// checkpoint rather than a model.
const configMetadata = "train_config"

// IsCheckpoint reports whether the file at path is a training run's
// checkpoint (its metadata holds training settings), reading only its
// header: such a file must not be overwritten by a model, which would
// end the run's resumption. A file that is absent or no safetensors file
// is not one.
func IsCheckpoint(path string) bool {
	f, err := weights.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	_, ok := f.Metadata[configMetadata]
	return ok
}

// CheckSettings returns the *SettingsError Run would return for the run
// folder dir with settings cfg, reading only the checkpoint's header: nil
// when dir holds no checkpoint or one of the same settings. It lets a
// caller refuse other settings before it reads the training set.
func CheckSettings(dir string, cfg Config) error {
	path := filepath.Join(dir, CheckpointFile)
	if !fileExists(path) {
		return nil
	}
	f, err := weights.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var saved Config
	if err := json.Unmarshal([]byte(f.Metadata[configMetadata]), &saved); err != nil {
		return fmt.Errorf("pretrain: %s: no readable training settings: %w", path, err)
	}
	if diffs := diffSettings(saved, cfg); len(diffs) > 0 {
		return &SettingsError{Path: path, Diffs: diffs}
	}
	return nil
}

// dataMetadata is the checkpoint's metadata key of the training set's
// DataIdentity, as JSON.
const dataMetadata = "train_data"

var (
	// errConfigDiffers is wrapped when a checkpoint was made with other settings.
	errConfigDiffers = errors.New("the checkpoint was made with other settings")
	// errDataDiffers is wrapped when a checkpoint was made on another training set.
	errDataDiffers = errors.New("the checkpoint was made on other training data")
)

// loadCheckpoint rebuilds a trainer from a checkpoint written by
// saveCheckpoint. The checkpoint's settings must equal cfg, and the
// training set it records must be train, whose identity is id. A
// checkpoint that records none (an earlier build's) is loaded with
// progress.legacyData set.
func loadCheckpoint(path string, cfg Config, train *Images, id DataIdentity) (*Trainer, progress, error) {
	var pr progress
	raw, err := weights.Load(path)
	if err != nil {
		return nil, pr, err
	}
	var saved Config
	if err := json.Unmarshal([]byte(raw.Metadata[configMetadata]), &saved); err != nil {
		return nil, pr, fmt.Errorf("pretrain: %s: no readable training settings: %w", path, err)
	}
	if diffs := diffSettings(saved, cfg); len(diffs) > 0 {
		return nil, pr, &SettingsError{Path: path, Diffs: diffs}
	}
	if dj, ok := raw.Metadata[dataMetadata]; ok {
		var saved DataIdentity
		if err := json.Unmarshal([]byte(dj), &saved); err != nil || saved.SHA256 == "" {
			return nil, pr, fmt.Errorf("pretrain: %s: unreadable record of the training set: %q", path, dj)
		}
		if !saved.Same(id) {
			return nil, pr, fmt.Errorf("pretrain: %s: %w: %s; this run's: %s; use another folder or the same data", path, errDataDiffers, saved, id)
		}
	}
	if err := json.Unmarshal([]byte(raw.Metadata["progress"]), &pr); err != nil {
		return nil, pr, fmt.Errorf("pretrain: %s: no readable progress record: %w", path, err)
	}
	_, recorded := raw.Metadata[dataMetadata]
	pr.legacyData = !recorded
	params := weights.NewState(path)
	moments := map[string]map[string][]float32{}
	for _, name := range raw.Names() {
		p, _ := raw.Param(name)
		switch {
		case strings.HasPrefix(name, expAvgPrefix):
			n := strings.TrimPrefix(name, expAvgPrefix)
			if moments[n] == nil {
				moments[n] = map[string][]float32{}
			}
			moments[n][optim.BufExpAvg] = p.Data
		case strings.HasPrefix(name, expAvgSqPrefix):
			n := strings.TrimPrefix(name, expAvgSqPrefix)
			if moments[n] == nil {
				moments[n] = map[string][]float32{}
			}
			moments[n][optim.BufExpAvgSq] = p.Data
		default:
			params.Set(p)
		}
	}
	if err := cfg.Model.Validate(params); err != nil {
		return nil, pr, err
	}
	t, err := newTrainer(cfg, train, params)
	if err != nil {
		return nil, pr, err
	}
	decayed, plain := optim.State[float32]{}, optim.State[float32]{}
	for _, p := range t.Params {
		bufs, ok := moments[p.Name]
		if !ok {
			continue
		}
		ps := optim.ParamState[float32]{Step: pr.OptimizerSteps[p.Name], Buffers: bufs}
		if p.Decay {
			decayed[p.Name] = ps
		} else {
			plain[p.Name] = ps
		}
	}
	if err := t.opt.SetState(decayed); err != nil {
		return nil, pr, fmt.Errorf("pretrain: %s: %w", path, err)
	}
	if err := t.optPlain.SetState(plain); err != nil {
		return nil, pr, fmt.Errorf("pretrain: %s: %w", path, err)
	}
	t.Step = pr.Step
	t.dataID = id
	return t, pr, nil
}

// SettingDiff is one setting in which a run differs from its checkpoint.
type SettingDiff struct {
	// Key is the setting's place in Config's JSON form, its keys joined
	// by dots: "lr", "model.vision.heads".
	Key string
	// Was and Now are its JSON values in the checkpoint and in this run.
	Was, Now string
}

// SettingsError is the error of a resumption whose settings differ from
// the checkpoint's: it names each setting that differs, with both
// values, rather than the whole configuration. It wraps errConfigDiffers.
type SettingsError struct {
	Path  string // the checkpoint
	Diffs []SettingDiff
}

func (e *SettingsError) Error() string {
	parts := make([]string, len(e.Diffs))
	for i, d := range e.Diffs {
		parts[i] = fmt.Sprintf("%s %s, was %s", d.Key, d.Now, d.Was)
	}
	return fmt.Sprintf("pretrain: %s: %v: %s; use another folder or the same settings", e.Path, errConfigDiffers, strings.Join(parts, "; "))
}

func (e *SettingsError) Unwrap() error { return errConfigDiffers }

// diffSettings returns the settings in which now differs from was, in
// the order of their keys: the leaves of their JSON forms (a list, such
// as the classes, is one leaf).
func diffSettings(was, now Config) []SettingDiff {
	var a, b any
	ja, _ := json.Marshal(was)
	jb, _ := json.Marshal(now)
	json.Unmarshal(ja, &a)
	json.Unmarshal(jb, &b)
	var out []SettingDiff
	var walk func(key string, a, b any)
	walk = func(key string, a, b any) {
		ma, okA := a.(map[string]any)
		mb, okB := b.(map[string]any)
		if okA && okB {
			keys := slices.Sorted(maps.Keys(ma))
			for k := range mb {
				if _, ok := ma[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range slices.Compact(keys) {
				walk(strings.TrimPrefix(key+"."+k, "."), ma[k], mb[k])
			}
			return
		}
		va, _ := json.Marshal(a)
		vb, _ := json.Marshal(b)
		if string(va) != string(vb) {
			out = append(out, SettingDiff{Key: key, Was: string(va), Now: string(vb)})
		}
	}
	walk("", a, b)
	return out
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
