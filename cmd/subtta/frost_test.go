package main

import (
	"bytes"
	"image"
	"image/jpeg"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// frostServer serves small stand-ins for the five overlays under
// /create_c/, except the names in broken (404) and garbled (not an image),
// and counts the requests. It points frostBaseURL at itself for the test.
func frostServer(t *testing.T, broken, garbled string) (files map[string][]byte, hits *atomic.Int32) {
	t.Helper()
	files = map[string][]byte{}
	for k, name := range frostFiles {
		img := image.NewGray(image.Rect(0, 0, 20+k, 10))
		for i := range img.Pix {
			img.Pix[i] = uint8(i * (k + 1))
		}
		var buf bytes.Buffer
		var err error
		if strings.HasSuffix(name, ".png") {
			err = png.Encode(&buf, img)
		} else {
			err = jpeg.Encode(&buf, img, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		files[name] = buf.Bytes()
	}
	hits = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		name, ok := strings.CutPrefix(r.URL.Path, "/create_c/")
		b, found := files[name]
		switch {
		case !ok || !found || name == broken:
			http.NotFound(w, r)
		case name == garbled:
			w.Write([]byte("<html>rate limited</html>"))
		default:
			w.Write(b)
		}
	}))
	t.Cleanup(srv.Close)
	old := frostBaseURL
	frostBaseURL = srv.URL + "/create_c"
	t.Cleanup(func() { frostBaseURL = old })
	return files, hits
}

func TestFrostDirDownload(t *testing.T) {
	files, hits := frostServer(t, "", "")
	cache := t.TempDir()
	t.Setenv("SUBTTA_CACHE", cache)
	t.Setenv("SUBTTA_FROST", "")
	var stderr bytes.Buffer
	dir, err := frostDir("", &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "frost"); dir != want {
		t.Errorf("frostDir = %s, want %s", dir, want)
	}
	for name, b := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s: %v, %d bytes; want the %d served", name, err, len(got), len(b))
		}
	}
	if hits.Load() != 5 || !strings.Contains(stderr.String(), "downloading 5 frost overlays") {
		t.Errorf("%d requests, stderr %q; want 5 and a note", hits.Load(), stderr.String())
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}

	// Cached: no more requests. One file lost: only it is fetched again.
	if _, err := frostDir("", &stderr); err != nil || hits.Load() != 5 {
		t.Errorf("second call: %v, %d requests; want no new request", err, hits.Load())
	}
	os.Remove(filepath.Join(dir, "frost4.jpg"))
	if _, err := frostDir("", &stderr); err != nil || hits.Load() != 6 {
		t.Errorf("after removing frost4.jpg: %v, %d requests; want one more", err, hits.Load())
	}
}

func TestFrostDirDownloadFailures(t *testing.T) {
	for _, tc := range []struct {
		broken, garbled, bad, want string
	}{
		{"frost3.png", "", "frost3.png", "404"},
		{"", "frost5.jpg", "frost5.jpg", "frost5.jpg"},
	} {
		frostServer(t, tc.broken, tc.garbled)
		cache := t.TempDir()
		t.Setenv("SUBTTA_CACHE", cache)
		t.Setenv("SUBTTA_FROST", "")
		_, err := frostDir("", &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--frost") {
			t.Errorf("%s: error %v, want one mentioning %q and --frost", tc.bad, err, tc.want)
		}
		dir := filepath.Join(cache, "frost")
		if _, err := os.Stat(filepath.Join(dir, tc.bad)); err == nil {
			t.Errorf("%s was saved though the download failed", tc.bad)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, ".*")); len(m) != 0 {
			t.Errorf("temporary files left: %v", m)
		}
	}
}

func TestFrostDirPrecedence(t *testing.T) {
	_, hits := frostServer(t, "", "")
	full := t.TempDir()
	for _, name := range frostFiles {
		os.WriteFile(filepath.Join(full, name), []byte("x"), 0o644)
	}
	partial := t.TempDir()
	os.WriteFile(filepath.Join(partial, "frost1.png"), []byte("x"), 0o644)
	t.Setenv("SUBTTA_CACHE", t.TempDir())

	t.Setenv("SUBTTA_FROST", partial)
	if dir, err := frostDir(full, &bytes.Buffer{}); err != nil || dir != full {
		t.Errorf("flag over environment: %q, %v", dir, err)
	}
	_, err := frostDir("", &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "SUBTTA_FROST") || !strings.Contains(err.Error(), "frost2.png, frost3.png, frost4.jpg, frost5.jpg") {
		t.Errorf("incomplete SUBTTA_FROST folder: %v", err)
	}
	t.Setenv("SUBTTA_FROST", full)
	if dir, err := frostDir("", &bytes.Buffer{}); err != nil || dir != full {
		t.Errorf("environment: %q, %v", dir, err)
	}
	if hits.Load() != 0 {
		t.Errorf("%d downloads with a folder given", hits.Load())
	}
}
