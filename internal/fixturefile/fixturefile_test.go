package fixturefile

import (
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// TestCLIPHeadsFromConfig: on a fixture set whose configuration files
// state head counts other than width/64 (fixture.SetWithHeads), CLIP and
// Config give every fixture model the stated counts, not the width/64 a
// checkpoint without a stored configuration would be guessed to have.
func TestCLIPHeadsFromConfig(t *testing.T) {
	const pt = "fixtures/clip-tiny.openai-fp16.pt"
	base := Config(t, pt)
	vision, text := fixture.OtherHeads(base.Vision.Width), fixture.OtherHeads(base.Text.Width)
	fixture.SetWithHeads(t, vision, text)
	for _, rel := range []string{"fixtures/clip-tiny.openai.safetensors", "fixtures/clip-tiny.hf.safetensors", pt} {
		s, c := CLIP(t, rel)
		if c.Vision.Heads != vision || c.Text.Heads != text || c.Inferred {
			t.Errorf("%s: CLIP gives %d vision and %d text heads (inferred %v), its config file states %d and %d",
				rel, c.Vision.Heads, c.Text.Heads, c.Inferred, vision, text)
		}
		if c := Config(t, rel); c.Vision.Heads != vision || c.Text.Heads != text {
			t.Errorf("%s: Config gives %d vision and %d text heads, want %d and %d", rel, c.Vision.Heads, c.Text.Heads, vision, text)
		}
		if len(s.Names()) == 0 {
			t.Errorf("%s: no tensors", rel)
		}
	}
}
