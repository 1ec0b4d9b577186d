package weights

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// ConvertOptions controls Convert.
type ConvertOptions struct {
	// DType stores every float tensor as F32 (the default when empty),
	// F16, BF16 or F64.
	DType DType
	// Zstd compresses the output; it is also implied by a destination
	// name ending in ".zst".
	Zstd bool
	// Config, when set, replaces the configuration found with or inferred
	// from the source (it is fitted to the tensors: see CLIPConfig.For).
	Config *CLIPConfig
}

// Convert reads the CLIP checkpoint at src (any format and layout Load
// reads) and writes it to dst as a safetensors file with OpenAI's tensor
// names, in the order of CLIPConfig.Names. The metadata records the source
// file name and format, the stored dtype, and the configuration as JSON
// ("config"), so that LoadCLIP(dst) needs no config.json. A configuration
// inferred from the tensor shapes (a source that stores none, and no
// opts.Config) is not written: its head counts are a guess (width/64), and
// dst, like src, then leaves its readers to infer it again and say so.
// dst is written atomically. It returns the configuration used, Inferred
// when it was guessed.
func Convert(src, dst string, opts ConvertOptions) (*CLIPConfig, error) {
	dt := opts.DType
	if dt == "" {
		dt = F32
	}
	if !dt.IsFloat() {
		return nil, fmt.Errorf("weights: convert: dtype %s is not a float type", dt)
	}
	s, cfg, err := LoadCLIPWith(src, opts.Config)
	if err != nil {
		return nil, err
	}
	meta := map[string]string{
		"format":        "pt",
		"layout":        string(LayoutOpenAI),
		"source":        filepath.Base(src),
		"source_format": string(s.Format),
		"dtype":         string(dt),
		"generator":     "github.com/subtta/subtta/weights.Convert",
	}
	if !cfg.Inferred {
		cj, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("weights: convert: %w", err)
		}
		meta["config"] = string(cj)
	}
	var tensors []Tensor
	for _, name := range cfg.Names() {
		p, err := s.Param(name)
		if err != nil {
			return nil, err
		}
		tensors = append(tensors, Tensor{Name: name, DType: dt, Shape: p.Shape, Data: p.Data})
	}
	if err := writeFile(dst, tensors, meta, opts.Zstd || filepath.Ext(dst) == ".zst"); err != nil {
		return nil, err
	}
	return cfg, nil
}
