package weights

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
)

// ConvertOptions controls Convert.
type ConvertOptions struct {
	// DType stores every float tensor as F32 (the default when empty),
	// F16, BF16 or F64. I8 stores the weights --precision int8 runs in int8
	// (CLIPConfig.Int8Names) quantised as it quantises them, each beside
	// its float32 scales (see Int8ScaleSuffix), and every other tensor as
	// F32.
	DType DType
	// Zstd compresses the output; it is also implied by a destination
	// name ending in ".zst".
	Zstd bool
	// Config, when set, replaces the configuration found with or inferred
	// from the source (it is fitted to the tensors: see CLIPConfig.For).
	Config *CLIPConfig
	// StoredWins makes Config stand only for the architecture of a source
	// that stores none: where the source stores one, a Config other than it
	// is an error wrapping ErrArchDiffers (LoadCLIPGiven), as for the
	// models clip.Create loads.
	StoredWins bool
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
//
// With DType I8 the weights of CLIPConfig.Int8Names are quantised by
// kernel.QuantizeInt8Rows, the rule --precision int8 applies to them at
// loading: loading dst (which dequantises them) and running it in int8
// quantises them to the stored values again (a scale may come back one
// float32 unit in the last place apart). The metadata's "quantization"
// records the scheme (Int8Quantization). A NaN or an infinity in such a
// weight is an error wrapping kernel.ErrNonFinite that names it.
func Convert(src, dst string, opts ConvertOptions) (*CLIPConfig, error) {
	return ConvertContext(context.Background(), src, dst, opts)
}

// ConvertContext is Convert stopped by ctx: once ctx is done it stops
// after reading src, after the tensor it is quantising, or at the next
// buffer of data it writes, and returns an error wrapping ctx.Err(); dst
// is left as it was (no temporary file stays beside it).
func ConvertContext(ctx context.Context, src, dst string, opts ConvertOptions) (*CLIPConfig, error) {
	dt := opts.DType
	if dt == "" {
		dt = F32
	}
	if !dt.IsFloat() && dt != I8 {
		return nil, fmt.Errorf("weights: convert: dtype %s is not a float type or I8", dt)
	}
	load := LoadCLIPWith
	if opts.StoredWins {
		load = LoadCLIPGiven
	}
	s, cfg, err := load(src, opts.Config)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("weights: %s not written: %w", dst, err)
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
	quantised := map[string]bool{}
	if dt == I8 {
		meta["quantization"] = Int8Quantization
		for _, name := range cfg.Int8Names() {
			quantised[name] = true
		}
	}
	var tensors []Tensor
	for _, name := range cfg.Names() {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("weights: %s not written: %w", dst, err)
		}
		p, err := s.Param(name)
		if err != nil {
			return nil, err
		}
		if !quantised[name] {
			stored := dt
			if dt == I8 {
				stored = F32
			}
			tensors = append(tensors, Tensor{Name: name, DType: stored, Shape: p.Shape, Data: p.Data})
			continue
		}
		w, scale, err := quantizeInt8(p)
		if err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, src)
		}
		tensors = append(tensors, w, scale)
	}
	if err := writeFile(ctx, dst, tensors, meta, opts.Zstd || filepath.Ext(dst) == ".zst"); err != nil {
		return nil, err
	}
	return cfg, nil
}
