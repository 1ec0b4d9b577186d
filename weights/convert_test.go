package weights

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

func TestConvert(t *testing.T) {
	want, _ := fixtureConfig(t)
	ref := loadFixture(t, "fixtures/clip-tiny.openai.safetensors")
	// The .pt stores no configuration: it is converted with its file's.
	pt, ptConfig := fixtureCLIP(t, "fixtures/clip-tiny.openai-fp16.pt")
	dir := t.TempDir()
	for _, c := range []struct {
		src, dst string
		opts     ConvertOptions
		expect   *State
		round    func(string, float32) float32
	}{
		{"fixtures/clip-tiny.hf.safetensors", "hf-f16.safetensors.zst", ConvertOptions{DType: F16}, ref,
			func(_ string, v float32) float32 { return HalfToFloat32(Float32ToHalf(v)) }},
		{"fixtures/clip-tiny.openai.safetensors", "bf16.safetensors", ConvertOptions{DType: BF16, Zstd: true}, ref,
			func(_ string, v float32) float32 { return BFloat16ToFloat32(Float32ToBFloat16(v)) }},
		{"fixtures/clip-tiny.openai-fp16.pt", "pt.safetensors", ConvertOptions{Config: ptConfig}, pt, nil},
	} {
		src := fixture.Path(t, c.src)
		dst := filepath.Join(dir, c.dst)
		if _, err := Convert(src, dst, c.opts); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(dst)
		if isZstd(raw) != (c.opts.Zstd || filepath.Ext(dst) == ".zst") {
			t.Errorf("%s: compressed = %v", dst, isZstd(raw))
		}
		s, cfg, err := LoadCLIP(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, want) {
			t.Errorf("%s: config %+v, want %+v", dst, cfg, want)
		}
		if s.Metadata["source"] != filepath.Base(src) || s.Metadata["config"] == "" {
			t.Errorf("%s: metadata %v", dst, s.Metadata)
		}
		if !slices.Equal(s.Names(), cfg.Names()) {
			t.Errorf("%s: order %v", dst, s.Names())
		}
		compareStates(t, s, c.expect, c.round)
	}
	if _, err := Convert(fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"), filepath.Join(dir, "x"), ConvertOptions{DType: I64}); err == nil {
		t.Error("integer dtype accepted")
	}
	bad := *want
	bad.Vision.Layers++
	if _, err := Convert(fixture.Path(t, "fixtures/clip-tiny.openai.safetensors"), filepath.Join(dir, "y"), ConvertOptions{Config: &bad}); err == nil {
		t.Error("a config that does not fit the tensors was accepted")
	}
}

// TestConvertInferredConfig: a source that stores no configuration,
// converted without one, gives an output that stores none either, so that
// its readers infer the head counts again and say so, rather than read the
// guess as a fact; the configuration returned is marked Inferred. Given its
// configuration file, the output stores that, head counts included.
func TestConvertInferredConfig(t *testing.T) {
	const rel = "fixtures/clip-tiny.openai-fp16.pt"
	_, known := fixtureCLIP(t, rel)
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		config *CLIPConfig
		want   *CLIPConfig
	}{
		{"guessed.safetensors", nil, headRule(known)},
		{"known.safetensors", known, known},
	} {
		dst := filepath.Join(dir, c.name)
		got, err := Convert(fixture.Path(t, rel), dst, ConvertOptions{Config: c.config})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Convert returned %+v, want %+v", c.name, got, c.want)
		}
		s, reread, err := LoadCLIP(dst)
		if err != nil {
			t.Fatal(err)
		}
		if _, stored := s.Metadata["config"]; stored == c.want.Inferred {
			t.Errorf("%s: config stored in the metadata: %v; the config is inferred: %v", c.name, stored, c.want.Inferred)
		}
		if !reflect.DeepEqual(reread, c.want) {
			t.Errorf("%s: read back as %+v, want %+v", c.name, reread, c.want)
		}
	}
}

// TestConvertStoredWins: with StoredWins, a Config for a source that
// stores another architecture is an error wrapping ErrArchDiffers that
// describes both, even where every tensor has the shape it wants (only the
// heads differ), and nothing is written; the stored one itself, or any
// Config for a source that stores none, is converted.
func TestConvertStoredWins(t *testing.T) {
	want, _ := fixtureConfig(t)
	stored := fixture.Path(t, "fixtures/clip-tiny.openai.safetensors")
	_, ptConfig := fixtureCLIP(t, "fixtures/clip-tiny.openai-fp16.pt")
	other := *want
	other.Text.Heads = fixture.OtherHeads(other.Text.Width)
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.safetensors")
	_, err := Convert(stored, dst, ConvertOptions{Config: &other, StoredWins: true})
	if !errors.Is(err, ErrArchDiffers) || !strings.Contains(err.Error(), stored+" stores "+want.Summary()+"; given "+other.Summary()) {
		t.Errorf("another architecture: %v; want ErrArchDiffers describing both", err)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Error("another architecture: DST written")
	}
	for _, c := range []struct {
		src string
		cfg *CLIPConfig
	}{{stored, want}, {fixture.Path(t, "fixtures/clip-tiny.openai-fp16.pt"), ptConfig}} {
		got, err := Convert(c.src, dst, ConvertOptions{Config: c.cfg, StoredWins: true})
		if err != nil || !reflect.DeepEqual(got, c.cfg) {
			t.Errorf("%s: %+v, %v; want %+v", c.src, got, err, c.cfg)
		}
	}
	// Without StoredWins, Config replaces the stored architecture.
	if got, err := Convert(stored, dst, ConvertOptions{Config: &other}); err != nil || got.Text.Heads != other.Text.Heads {
		t.Errorf("without StoredWins: %+v, %v; want the Config's %d text heads", got, err, other.Text.Heads)
	}
}
