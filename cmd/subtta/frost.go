package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/atomicfile"
)

// frostBaseURL is the public home of the frost overlays
// (hendrycks/robustness, Apache-2.0). Tests point it at a local server.
var frostBaseURL = "https://raw.githubusercontent.com/hendrycks/robustness/master/ImageNet-C/create_c/"

// frostFiles are the overlays the frost corruption draws from (frost6.jpg
// exists upstream but is never used).
var frostFiles = []string{"frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"}

// maxFrostBytes bounds one downloaded overlay (the largest is about 1 MB).
const maxFrostBytes = 32 << 20

// frostDir returns the folder holding the frost overlays: flagValue (a
// --frost flag) if set, else $SUBTTA_FROST, else <cache>/frost, where
// missing overlays are downloaded from frostBaseURL on first use (progress
// on stderr). A folder given by flag or environment must hold all five.
func frostDir(flagValue string, stderr io.Writer) (string, error) {
	for _, src := range []struct{ what, dir string }{{"--frost", flagValue}, {"SUBTTA_FROST", os.Getenv("SUBTTA_FROST")}} {
		if src.dir == "" {
			continue
		}
		if missing := missingFrost(src.dir); len(missing) > 0 {
			return "", fmt.Errorf("frost overlays: %s folder %s lacks %s", src.what, src.dir, strings.Join(missing, ", "))
		}
		return src.dir, nil
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "frost")
	missing := missingFrost(dir)
	if len(missing) == 0 {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("frost overlays: %w", err)
	}
	base := strings.TrimSuffix(frostBaseURL, "/") + "/"
	fmt.Fprintf(stderr, "downloading %d frost overlays from %s into %s\n", len(missing), base, dir)
	for _, name := range missing {
		if err := downloadFrost(base+name, filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("frost overlays (give --frost DIR or SUBTTA_FROST, a folder with %s): %w", strings.Join(frostFiles, ", "), err)
		}
	}
	return dir, nil
}

// missingFrost lists the overlays dir does not hold.
func missingFrost(dir string) []string {
	var missing []string
	for _, name := range frostFiles {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || !st.Mode().IsRegular() {
			missing = append(missing, name)
		}
	}
	return missing
}

// downloadFrost fetches url, checks that it decodes as an image, and saves
// it at dst through a temporary file, so that dst is complete or absent.
func downloadFrost(url, dst string) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxFrostBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if len(b) > maxFrostBytes {
		return fmt.Errorf("GET %s: larger than %d bytes", url, maxFrostBytes)
	}
	if _, err := data.Decode(url, b); err != nil {
		return err
	}
	return atomicfile.Write(dst, b)
}
