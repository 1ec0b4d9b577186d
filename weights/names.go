package weights

import (
	"fmt"
	"strconv"
	"strings"
)

// Layout names a convention for CLIP tensor names.
type Layout string

// The layouts ToOpenAI understands. open_clip's ViT models use OpenAI's
// names (visual.proj, text_projection, attn.in_proj_weight, ...), so they
// are reported as LayoutOpenAI.
const (
	LayoutOpenAI Layout = "openai"
	LayoutHF     Layout = "hf" // transformers CLIPModel
)

// DetectLayout tells which naming convention s uses.
func DetectLayout(s *State) (Layout, error) {
	hf, openai := 0, 0
	oa := (&CLIPConfig{}).TensorNames()
	for _, n := range s.order {
		switch {
		case strings.HasPrefix(n, "vision_model.") || strings.HasPrefix(n, "text_model.") ||
			n == "visual_projection.weight" || n == "text_projection.weight":
			hf++
		case strings.HasPrefix(n, "visual.layer1."):
			return "", fmt.Errorf("weights: %s: a ResNet vision tower (visual.layer1...): only ViT CLIP models are supported", s.Source)
		case strings.HasPrefix(n, "visual.") || strings.HasPrefix(n, textBlocks) ||
			n == oa.Text.Token || n == oa.Text.Proj || n == oa.Text.LNFinal.Weight:
			openai++
		}
	}
	switch {
	case hf > 0 && openai == 0:
		return LayoutHF, nil
	case openai > 0 && hf == 0:
		return LayoutOpenAI, nil
	case hf > 0:
		return "", fmt.Errorf("weights: %s: tensor names mix the Hugging Face and OpenAI layouts", s.Source)
	}
	return "", fmt.Errorf("weights: %s: not a CLIP state (no visual.*, transformer.*, vision_model.* or text_model.* tensors)", s.Source)
}

// openAIExtras are entries of OpenAI's TorchScript state dict that hold
// settings rather than weights; clip.load drops them too.
var openAIExtras = []string{"input_resolution", "context_length", "vocab_size"}

// ToOpenAI returns s with OpenAI's tensor names, converting from the
// Hugging Face CLIPModel layout when needed (q/k/v projections concatenated
// into in_proj, the projection matrices transposed). A state already in
// OpenAI/open_clip layout is returned as a new State sharing its tensors,
// without the non-weight entries OpenAI's TorchScript files add
// (input_resolution, context_length, vocab_size, attention masks).
// Unknown Hugging Face names are an error rather than silently dropped.
func ToOpenAI(s *State) (*State, error) {
	layout, err := DetectLayout(s)
	if err != nil {
		return nil, err
	}
	out := &State{Source: s.Source, Format: s.Format, Metadata: s.Metadata, ConfigJSON: s.ConfigJSON}
	if layout == LayoutOpenAI {
		for _, n := range s.order {
			// A TorchScript module tree may also carry the causal mask as
			// a tensor attribute; it is derived, not a weight.
			if !contains(openAIExtras, n) && !strings.HasSuffix(n, ".attn_mask") {
				out.Set(s.params[n])
			}
		}
		return out, nil
	}
	type qkv struct{ parts [3]*Param }
	byName := map[string]*qkv{}
	var order []string // output names, in_proj entries as placeholders
	for _, n := range s.order {
		p := s.params[n]
		if strings.HasSuffix(n, ".position_ids") {
			continue // a buffer of 0..N-1 that recent transformers no longer saves
		}
		oa, part, transpose, ok := hfToOpenAI(n)
		if !ok {
			return nil, fmt.Errorf("weights: %s: tensor %q: no OpenAI name for this Hugging Face tensor", s.Source, n)
		}
		switch {
		case part >= 0:
			q := byName[oa]
			if q == nil {
				q = &qkv{}
				byName[oa] = q
				order = append(order, oa)
			}
			q.parts[part] = p
		case transpose:
			t, err := transpose2(p)
			if err != nil {
				return nil, fmt.Errorf("weights: %s: tensor %q: %w", s.Source, n, err)
			}
			t.Name = oa
			out.Set(t)
			order = append(order, oa)
		default:
			out.Set(&Param{Name: oa, Shape: p.Shape, DType: p.DType, Data: p.Data})
			order = append(order, oa)
		}
	}
	for name, q := range byName {
		p, err := concatQKV(name, q.parts)
		if err != nil {
			return nil, fmt.Errorf("weights: %s: %w", s.Source, err)
		}
		out.Set(p)
	}
	out.order = order
	return out, nil
}

// ToHF returns an OpenAI-layout state with the Hugging Face CLIPModel
// names: the inverse of ToOpenAI.
func ToHF(s *State) (*State, error) {
	layout, err := DetectLayout(s)
	if err != nil {
		return nil, err
	}
	if layout != LayoutOpenAI {
		return nil, fmt.Errorf("weights: %s: ToHF needs an OpenAI-layout state, have %s", s.Source, layout)
	}
	out := &State{Source: s.Source, Format: s.Format, Metadata: s.Metadata, ConfigJSON: s.ConfigJSON}
	for _, n := range s.order {
		if contains(openAIExtras, n) {
			continue
		}
		p := s.params[n]
		hf, split, transpose, ok := openAIToHF(n)
		if !ok {
			return nil, fmt.Errorf("weights: %s: tensor %q: no Hugging Face name for this OpenAI tensor", s.Source, n)
		}
		switch {
		case split:
			if len(p.Shape) == 0 || p.Shape[0]%3 != 0 {
				return nil, fmt.Errorf("weights: %s: tensor %q: shape %v cannot split into q, k, v: %w", s.Source, n, p.Shape, ErrShape)
			}
			rows := len(p.Data) / 3
			shape := append([]int{p.Shape[0] / 3}, p.Shape[1:]...)
			for i, x := range []string{"q", "k", "v"} {
				name := strings.Replace(hf, "{x}", x, 1)
				out.Set(&Param{Name: name, Shape: shape, DType: p.DType, Data: p.Data[i*rows : (i+1)*rows : (i+1)*rows]})
			}
		case transpose:
			t, err := transpose2(p)
			if err != nil {
				return nil, fmt.Errorf("weights: %s: tensor %q: %w", s.Source, n, err)
			}
			t.Name = hf
			out.Set(t)
		default:
			out.Set(&Param{Name: hf, Shape: p.Shape, DType: p.DType, Data: p.Data})
		}
	}
	return out, nil
}

// The names that differ only by a fixed rename, HF -> OpenAI.
var hfFixed = func() map[string]string {
	n := (&CLIPConfig{}).TensorNames()
	v, t := n.Vision, n.Text
	return map[string]string{
		"vision_model.embeddings.class_embedding":           v.Class,
		"vision_model.embeddings.patch_embedding.weight":    v.Conv,
		"vision_model.embeddings.position_embedding.weight": v.Pos,
		"vision_model.pre_layrnorm.weight":                  v.LNPre.Weight,
		"vision_model.pre_layrnorm.bias":                    v.LNPre.Bias,
		"vision_model.post_layernorm.weight":                v.LNPost.Weight,
		"vision_model.post_layernorm.bias":                  v.LNPost.Bias,
		"text_model.embeddings.token_embedding.weight":      t.Token,
		"text_model.embeddings.position_embedding.weight":   t.Pos,
		"text_model.final_layer_norm.weight":                t.LNFinal.Weight,
		"text_model.final_layer_norm.bias":                  t.LNFinal.Bias,
		"logit_scale":                                       logitScale,
	}
}()

// The transposed projections, HF -> OpenAI.
var hfTransposed = func() map[string]string {
	n := (&CLIPConfig{}).TensorNames()
	return map[string]string{"visual_projection.weight": n.Vision.Proj, "text_projection.weight": n.Text.Proj}
}()

// The per-layer renames, HF -> OpenAI, after the layer prefix; the q, k, v
// projections are stacked into the block's QKV tensors.
var hfLayer = func() map[string]string {
	b := blockNames("")
	return map[string]string{
		"self_attn.out_proj.weight": b.Out.Weight,
		"self_attn.out_proj.bias":   b.Out.Bias,
		"layer_norm1.weight":        b.LN1.Weight,
		"layer_norm1.bias":          b.LN1.Bias,
		"layer_norm2.weight":        b.LN2.Weight,
		"layer_norm2.bias":          b.LN2.Bias,
		"mlp.fc1.weight":            b.FC.Weight,
		"mlp.fc1.bias":              b.FC.Bias,
		"mlp.fc2.weight":            b.Proj.Weight,
		"mlp.fc2.bias":              b.Proj.Bias,
	}
}()

// The layer prefixes of the two towers, HF and OpenAI.
var towers = [][2]string{
	{"vision_model.encoder.layers.", visionBlocks},
	{"text_model.encoder.layers.", textBlocks},
}

// hfToOpenAI maps one HF name. part is 0, 1, 2 for the q, k, v slices of an
// in_proj tensor and -1 otherwise.
func hfToOpenAI(n string) (name string, part int, transpose, ok bool) {
	if oa, ok := hfFixed[n]; ok {
		return oa, -1, false, true
	}
	if oa, ok := hfTransposed[n]; ok {
		return oa, -1, true, true
	}
	for _, t := range towers {
		layer, rest, ok := splitLayer(n, t[0])
		if !ok {
			continue
		}
		prefix := t[1] + layer + "."
		if oa, ok := hfLayer[rest]; ok {
			return prefix + oa, -1, false, true
		}
		qkv := blockNames(prefix).QKV
		for i, x := range []string{"q", "k", "v"} {
			switch rest {
			case "self_attn." + x + "_proj.weight":
				return qkv.Weight, i, false, true
			case "self_attn." + x + "_proj.bias":
				return qkv.Bias, i, false, true
			}
		}
	}
	return "", -1, false, false
}

// openAIToHF maps one OpenAI name; for in_proj tensors (split) the name
// holds "{x}" where q, k or v goes.
func openAIToHF(n string) (name string, split, transpose, ok bool) {
	for hf, oa := range hfFixed {
		if oa == n {
			return hf, false, false, true
		}
	}
	for hf, oa := range hfTransposed {
		if oa == n {
			return hf, false, true, true
		}
	}
	for _, t := range towers {
		layer, rest, ok := splitLayer(n, t[1])
		if !ok {
			continue
		}
		prefix := t[0] + layer + "."
		for hf, oa := range hfLayer {
			if oa == rest {
				return prefix + hf, false, false, true
			}
		}
		switch qkv := blockNames("").QKV; rest {
		case qkv.Weight:
			return prefix + "self_attn.{x}_proj.weight", true, false, true
		case qkv.Bias:
			return prefix + "self_attn.{x}_proj.bias", true, false, true
		}
	}
	return "", false, false, false
}

// splitLayer splits prefix + "N." + rest.
func splitLayer(n, prefix string) (layer, rest string, ok bool) {
	after, ok := strings.CutPrefix(n, prefix)
	if !ok {
		return "", "", false
	}
	layer, rest, ok = strings.Cut(after, ".")
	if !ok {
		return "", "", false
	}
	if _, err := strconv.Atoi(layer); err != nil {
		return "", "", false
	}
	return layer, rest, true
}

// concatQKV stacks the q, k, v parts along the first axis.
func concatQKV(name string, parts [3]*Param) (*Param, error) {
	for i, p := range parts {
		if p == nil {
			return nil, fmt.Errorf("tensor %q: the %s projection is missing: %w", name, []string{"q", "k", "v"}[i], ErrNotFound)
		}
		if !shapeEqual(p.Shape, parts[0].Shape) || len(p.Shape) == 0 {
			return nil, fmt.Errorf("tensor %q: q, k, v shapes %v, %v, %v differ: %w", name, parts[0].Shape, parts[1].Shape, parts[2].Shape, ErrShape)
		}
	}
	n := len(parts[0].Data)
	data := make([]float32, 3*n)
	for i, p := range parts {
		copy(data[i*n:], p.Data)
	}
	shape := append([]int{3 * parts[0].Shape[0]}, parts[0].Shape[1:]...)
	return &Param{Name: name, Shape: shape, DType: parts[0].DType, Data: data}, nil
}

// transpose2 returns the transpose of a matrix.
func transpose2(p *Param) (*Param, error) {
	if len(p.Shape) != 2 {
		return nil, fmt.Errorf("shape %v, want a matrix to transpose: %w", p.Shape, ErrShape)
	}
	r, c := p.Shape[0], p.Shape[1]
	data := make([]float32, len(p.Data))
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			data[j*r+i] = p.Data[i*c+j]
		}
	}
	return &Param{Name: p.Name, Shape: []int{c, r}, DType: p.DType, Data: data}, nil
}

func shapeEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
