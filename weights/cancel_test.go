package weights

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

// countdownContext is done (Err gives context.Canceled) from its
// (left+1)-th call of Err on, as if a signal had come during the work
// between two checks; calls counts the checks.
type countdownContext struct {
	context.Context
	left, calls int
}

func (c *countdownContext) Err() error {
	c.calls++
	if c.left--; c.left < 0 {
		return context.Canceled
	}
	return nil
}

// TestWriteFileContextCancelled: a write stopped before it starts, after
// its first buffer, or later returns an error wrapping context.Canceled,
// leaves the file it would have replaced as it was and no temporary file
// beside it, plain and compressed.
func TestWriteFileContextCancelled(t *testing.T) {
	// 32 tensors of 256 KiB: the writer hands each tensor's data on in
	// one call or more.
	data := make([]float32, 1<<16)
	for i := range data {
		data[i] = float32(i)
	}
	var in []Tensor
	for i := range 32 {
		in = append(in, Tensor{Name: fmt.Sprint("t", i), Shape: []int{256, 256}, Data: data})
	}
	for _, name := range []string{"m.safetensors", "m.safetensors.zst"} {
		dir := t.TempDir()
		path := filepath.Join(dir, name)
		old := []byte("the file before")
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		// The checks a whole write makes: the cases below stop it at its
		// start, in its first buffers and in its middle.
		whole := &countdownContext{Context: context.Background(), left: 1 << 30}
		if err := WriteFileContext(whole, filepath.Join(dir, "whole"), in, nil); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "whole"))
		if whole.calls < 8 {
			t.Fatalf("%s: %d checks of the context in a whole write: too few to stop it in its middle", name, whole.calls)
		}
		for _, left := range []int{0, 1, 2, whole.calls / 2, whole.calls - 2} {
			ctx := &countdownContext{Context: context.Background(), left: left}
			err := WriteFileContext(ctx, path, in, nil)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s, stopped after %d of %d checks: error %v, want context.Canceled", name, left, whole.calls, err)
			}
			if b, _ := os.ReadFile(path); string(b) != string(old) {
				t.Errorf("%s, stopped after %d checks: the file holds %d bytes, not its former content", name, left, len(b))
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("%s, stopped after %d checks: %d files in the folder, want only the former file", name, left, len(entries))
			}
		}
	}
}

// TestConvertContextCancelled: a conversion stopped while it reads, while
// it quantises or while it writes leaves no file behind.
func TestConvertContextCancelled(t *testing.T) {
	src := fixture.Path(t, "fixtures/clip-tiny.openai.safetensors")
	dir := t.TempDir()
	dst := filepath.Join(dir, "x.safetensors")
	whole := &countdownContext{Context: context.Background(), left: 1 << 30}
	if _, err := ConvertContext(whole, src, dst, ConvertOptions{DType: I8}); err != nil {
		t.Fatal(err)
	}
	os.Remove(dst)
	for _, left := range []int{0, 1, whole.calls / 2, whole.calls - 2} {
		ctx := &countdownContext{Context: context.Background(), left: left}
		if _, err := ConvertContext(ctx, src, dst, ConvertOptions{DType: I8}); !errors.Is(err, context.Canceled) {
			t.Errorf("stopped after %d of %d checks: error %v, want context.Canceled", left, whole.calls, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("stopped after %d checks: %d files left", left, len(entries))
		}
	}
}
