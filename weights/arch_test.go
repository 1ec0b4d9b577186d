package weights

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestArchMatchesOpenCLIPConfig: every architecture, written as open_clip's
// model-config JSON, parses to the configuration Arch returns, so the table
// and ParseConfig derive heads and MLP widths alike.
func TestArchMatchesOpenCLIPConfig(t *testing.T) {
	for _, name := range ArchNames() {
		a := openCLIPArchs[name]
		vision := map[string]any{"image_size": a.imageSize, "layers": a.visionLayers, "width": a.visionWidth, "patch_size": a.patchSize}
		if a.headWidth != 0 {
			vision["head_width"] = a.headWidth
		}
		if a.mlpRatio != 0 {
			vision["mlp_ratio"] = a.mlpRatio
		}
		doc := map[string]any{
			"embed_dim":  a.embed,
			"vision_cfg": vision,
			"text_cfg":   map[string]any{"context_length": 77, "vocab_size": 49408, "width": a.textWidth, "heads": a.textHeads, "layers": a.textLayers},
		}
		if a.quickGELU {
			doc["quick_gelu"] = true
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := ParseConfig(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := Arch(name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, parsed) {
			t.Errorf("%s: Arch %+v\nParseConfig %+v", name, got, parsed)
		}
	}
}

// TestArchKnownShapes checks figures published with the checkpoints (their
// Hugging Face configs): heads other than width/64, and rounded MLP widths.
func TestArchKnownShapes(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		visionHeads, visionMLP, text int
		act                          string
	}{
		{"ViT-B-32-quickgelu", 12, 3072, 8, QuickGELU},
		{"ViT-L-14-336", 16, 4096, 12, GELU},
		{"ViT-H-14", 16, 5120, 16, GELU},
		{"ViT-g-14", 16, 6144, 16, GELU},
		{"ViT-bigG-14", 16, 8192, 20, GELU},
	} {
		c, err := Arch(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if c.Vision.Heads != tc.visionHeads || c.Vision.MLPWidth != tc.visionMLP || c.Text.Heads != tc.text || c.Activation != tc.act {
			t.Errorf("%s: vision heads %d, MLP %d, text heads %d, %s; want %d, %d, %d, %s", tc.name,
				c.Vision.Heads, c.Vision.MLPWidth, c.Text.Heads, c.Activation, tc.visionHeads, tc.visionMLP, tc.text, tc.act)
		}
	}
	_, err := Arch("ViT-B/32")
	if err == nil || !strings.Contains(err.Error(), "ViT-B-32") {
		t.Errorf("unknown name: %v, want an error listing the known names", err)
	}
}
