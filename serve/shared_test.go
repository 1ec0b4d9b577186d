package serve

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// savedStats reads a stream's counters from its state file through s.
func savedStats(t *testing.T, s *Server, id string) streamStats {
	t.Helper()
	sv, err := s.readState(id)
	if err != nil || sv == nil {
		t.Fatalf("stream %s: saved state %v, %v", id, sv, err)
	}
	return sv.Stats
}

// Two servers on one state directory take turns on a stream, each still
// holding the stream in memory from its last turn: every step continues
// from the other's last save, bit for bit as one server stepping every
// batch, and the saved stream counts every image answered.
func TestTwoServersShareStateDir(t *testing.T) {
	const size = 2
	batches := batchesOf(images(t, 6*size), size)
	config := func(dir string) Config {
		cfg := testConfig(t)
		cfg.BatchSize, cfg.StateDir = size, dir
		return cfg
	}
	_, one := startServer(t, config(t.TempDir()))
	var want []ClassifyResponse
	for _, b := range batches {
		want = append(want, streamBatch(t, one, "cam", b)...)
	}

	dir := t.TempDir()
	a, tsA := startServer(t, config(dir))
	_, tsB := startServer(t, config(dir))
	// a's copy is stale at batches 2 and 5, b's at batch 4.
	for i, ts := range []*httptest.Server{tsA, tsB, tsA, tsA, tsB, tsA} {
		got := streamBatch(t, ts, "cam", batches[i])
		for k, g := range got {
			if w := want[i*size+k]; !slices.Equal(g.Logits, w.Logits) || g.Stream.Batch != int64(i) {
				t.Fatalf("batch %d, image %d: batch index %d, logits %v; one server: %v", i, k, g.Stream.Batch, g.Logits, w.Logits)
			}
		}
		// Both servers report the newest counters.
		for name, ts := range map[string]*httptest.Server{"a": tsA, "b": tsB} {
			if st, code := streamStatus(t, ts, "cam"); code != http.StatusOK || st.Images != int64((i+1)*size) {
				t.Errorf("after batch %d, server %s reports %d images (status %d); want %d", i, name, st.Images, code, (i+1)*size)
			}
		}
	}
	if st := savedStats(t, a, "cam"); st.Images != int64(len(want)) || st.Batches != int64(len(batches)) {
		t.Errorf("saved stream: %d images in %d batches; answered %d in %d", st.Images, st.Batches, len(want), len(batches))
	}
}
