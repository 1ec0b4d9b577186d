package weights

import (
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

func TestOpenFixture(t *testing.T) {
	f, err := Open(fixture.Path(t, "fixtures/forward.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, shape, err := f.Float32("image_features")
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 2 || len(x) != shape[0]*shape[1] {
		t.Fatalf("image_features shape %v, %d values", shape, len(x))
	}
	if _, _, err := f.Float32("no.such.tensor"); err == nil {
		t.Fatal("missing tensor gave no error")
	}
}
