package weights

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestZstdBombRefused: a few kilobytes that expand to a hundred megabytes
// (a corrupt or hostile file; the fuzzer's workers died of one) are refused
// before the memory is taken, with an error that says so.
func TestZstdBombRefused(t *testing.T) {
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for range 128 { // 128 MB of zeros
		enc.Write(zeros)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Parse("bomb.safetensors.zst", buf.Bytes())
	if err == nil || !strings.Contains(err.Error(), "expand to more than") {
		t.Fatalf("%d bytes that expand to 128 MB: error %v, want one that says it expands too far", buf.Len(), err)
	}
}
