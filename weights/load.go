package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Load reads a model state from path, recognising the format by content:
// a safetensors file (plain or zstd-compressed), a PyTorch zip archive
// (torch.save state dict or TorchScript module), or a directory in the
// Hugging Face layout (model.safetensors[.zst], a sharded
// model.safetensors.index.json, or pytorch_model.bin / open_clip_pytorch_model.bin,
// with config.json or open_clip_config.json beside it).
//
// Weights stored in int8 (an I8 tensor W beside its scales W.int8_scale,
// as Convert writes with DType I8) are dequantised to float32, q·scale, and
// their scale tensors dropped; an I8 tensor without valid scales, or scales
// beside a weight that is not I8, is an error wrapping ErrInt8Scale.
func Load(path string) (*State, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	var s *State
	if st.IsDir() {
		s, err = loadDir(path)
	} else {
		s, err = loadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if err := s.dequantizeInt8(); err != nil {
		return nil, err
	}
	return s, nil
}

func loadFile(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	defer f.Close()
	data, unmap, err := mapFile(f)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	if unmap != nil {
		defer unmap()
	}
	return loadBytes(path, data)
}

// loadBytes reads a state from a file's contents. Nothing in the State
// refers to data afterwards.
func loadBytes(path string, data []byte) (*State, error) {
	switch {
	case isZstd(data):
		dec, err := decompressZstd(data)
		if err != nil {
			return nil, fmt.Errorf("weights: %s: %w", path, err)
		}
		return stateFromSafetensors(path, dec)
	case bytes.HasPrefix(data, []byte("PK\x03\x04")) || bytes.HasPrefix(data, []byte("PK\x05\x06")):
		return loadPyTorch(path, data)
	case len(data) >= 9 && (data[8] == '{' || data[8] == ' '):
		// Before the pickle test: a safetensors header length can start
		// with the bytes of a pickle's protocol (0x180 bytes: 80 01 ...),
		// while a legacy file's ninth byte is inside its pickled magic
		// number.
		return stateFromSafetensors(path, data)
	case len(data) >= 2 && data[0] == 0x80 && data[1] <= 5:
		return nil, fmt.Errorf("weights: %s: a legacy (pre-zip, torch < 1.6) PyTorch file; re-save it with a recent torch.save", path)
	}
	return nil, fmt.Errorf("weights: %s: unrecognised file format (not safetensors, zstd or a PyTorch zip)", path)
}

func stateFromSafetensors(path string, data []byte) (*State, error) {
	f, err := parse(path, data)
	if err != nil {
		return nil, err
	}
	s := NewState(path)
	s.Format = FormatSafetensors
	s.Metadata = f.Metadata
	for _, name := range f.order {
		ti := f.tensors[name]
		p := &Param{Name: name, Shape: ti.Shape, DType: ti.DType, Data: make([]float32, ti.NumElements())}
		if err := decodeFloat32(p.Data, ti.DType, f.body[ti.Begin:ti.End]); err != nil {
			return nil, fmt.Errorf("weights: %s: tensor %q: %w", path, name, err)
		}
		s.Set(p)
	}
	for _, key := range []string{"config", "model_config"} {
		if c, ok := s.Metadata[key]; ok && json.Valid([]byte(c)) {
			s.ConfigJSON = []byte(c)
			break
		}
	}
	return s, nil
}

// loadDir reads a model directory in the Hugging Face layout.
func loadDir(dir string) (*State, error) {
	var s *State
	var err error
	index := filepath.Join(dir, "model.safetensors.index.json")
	if _, e := os.Stat(index); e == nil {
		s, err = loadSharded(dir, index)
	} else {
		found := ""
		for _, name := range []string{"model.safetensors", "model.safetensors.zst", "open_clip_model.safetensors",
			"pytorch_model.bin", "open_clip_pytorch_model.bin"} {
			if _, e := os.Stat(filepath.Join(dir, name)); e == nil {
				found = name
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("weights: %s: no model.safetensors, model.safetensors.zst, pytorch_model.bin or open_clip_pytorch_model.bin in the directory", dir)
		}
		s, err = loadFile(filepath.Join(dir, found))
	}
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"config.json", "open_clip_config.json"} {
		b, e := os.ReadFile(filepath.Join(dir, name))
		if e == nil {
			s.ConfigJSON = b
			break
		}
	}
	return s, nil
}

// loadSharded reads the shards listed in a model.safetensors.index.json.
func loadSharded(dir, index string) (*State, error) {
	b, err := os.ReadFile(index)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("weights: %s: not a safetensors index (want a non-empty weight_map): %v", index, err)
	}
	var shards []string
	for _, f := range idx.WeightMap {
		if !slices.Contains(shards, f) {
			shards = append(shards, f)
		}
	}
	sort.Strings(shards)
	s := NewState(dir)
	s.Format = FormatSafetensors
	for _, shard := range shards {
		if shard != filepath.Base(shard) || strings.HasPrefix(shard, ".") {
			return nil, fmt.Errorf("weights: %s: shard name %q is not a plain file name", index, shard)
		}
		part, err := loadFile(filepath.Join(dir, shard))
		if err != nil {
			return nil, err
		}
		for _, name := range part.order {
			if s.Has(name) {
				return nil, fmt.Errorf("weights: %s: tensor %q appears in two shards", dir, name)
			}
			s.Set(part.params[name])
		}
		if s.Metadata == nil {
			s.Metadata = part.Metadata
		}
	}
	for name, shard := range idx.WeightMap {
		if !s.Has(name) {
			return nil, fmt.Errorf("weights: %s: tensor %q listed in the index is missing from %s: %w", dir, name, shard, ErrNotFound)
		}
	}
	return s, nil
}

// LoadCLIP loads a CLIP checkpoint in any supported format and layout
// (see Load), renames it to OpenAI's names, and returns it with its
// configuration: the one stored with the weights when there is one
// (config.json, safetensors metadata), otherwise one inferred from the
// tensor shapes. The configuration is validated against the tensors.
func LoadCLIP(path string) (*State, *CLIPConfig, error) {
	return LoadCLIPWith(path, nil)
}

// LoadCLIPWith is LoadCLIP with the architecture given: cfg, when not nil,
// replaces the configuration stored with the weights (none is then
// inferred), fitted to the tensors (see CLIPConfig.For).
func LoadCLIPWith(path string, cfg *CLIPConfig) (*State, *CLIPConfig, error) {
	raw, err := Load(path)
	if err != nil {
		return nil, nil, err
	}
	return clipState(path, raw, cfg, false)
}

// ErrArchDiffers: LoadCLIPGiven was given an architecture other than the
// one the checkpoint stores.
var ErrArchDiffers = errors.New("the checkpoint stores another architecture")

// LoadCLIPGiven is LoadCLIPWith for an architecture given by hand (a
// --arch or --model-config): cfg stands for the architecture only of a
// checkpoint that stores none. Where the checkpoint stores one, cfg must be
// that one (its logit scale aside, which the tensors decide), else the
// error wraps ErrArchDiffers and describes both: an architecture that
// contradicts the checkpoint's own is more likely a mistake than a fix,
// and comparing the two says what differs where the tensor shapes would
// name one tensor. It is the rule clip.Create applies to the models it
// loads.
func LoadCLIPGiven(path string, cfg *CLIPConfig) (*State, *CLIPConfig, error) {
	raw, err := Load(path)
	if err != nil {
		return nil, nil, err
	}
	return clipState(path, raw, cfg, true)
}

// LoadCLIPBytes is LoadCLIP for a file's contents held in memory (a
// safetensors file, plain or zstd-compressed, or a PyTorch archive, such as
// an embedded model; int8 weights dequantised as Load does); name
// identifies it in errors.
func LoadCLIPBytes(name string, data []byte) (*State, *CLIPConfig, error) {
	raw, err := loadBytes(name, data)
	if err != nil {
		return nil, nil, err
	}
	if err := raw.dequantizeInt8(); err != nil {
		return nil, nil, err
	}
	return clipState(name, raw, nil, false)
}

// clipState renames raw to OpenAI's names and fits cfg to it, or finds its
// configuration when cfg is nil. With storedWins, a cfg for a checkpoint
// that stores its configuration must be that one (LoadCLIPGiven).
func clipState(path string, raw *State, cfg *CLIPConfig, storedWins bool) (*State, *CLIPConfig, error) {
	s, err := ToOpenAI(raw)
	if err != nil {
		return nil, nil, err
	}
	var c *CLIPConfig
	switch {
	case cfg != nil && (s.ConfigJSON == nil || !storedWins):
		if c, err = cfg.For(s); err != nil {
			return nil, nil, err
		}
	case s.ConfigJSON != nil:
		if c, err = ParseConfig(s.ConfigJSON); err != nil {
			return nil, nil, fmt.Errorf("weights: %s: %w", path, err)
		}
		if c, err = c.For(s); err != nil {
			return nil, nil, err
		}
		if cfg != nil {
			// Compared before cfg is checked against the tensors, which
			// would name the first tensor of another shape and not what
			// differs.
			given := *cfg
			given.HasLogitScale, given.Inferred = c.HasLogitScale, false
			if given != *c {
				return nil, nil, fmt.Errorf("%w: %s stores %s; given %s", ErrArchDiffers, path, c.Summary(), given.Summary())
			}
		}
	default:
		if c, err = InferConfig(s); err != nil {
			return nil, nil, err
		}
	}
	return s, c, nil
}
