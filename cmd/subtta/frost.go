package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/subtta/subtta/builtin"
)

// frostFiles are the overlays the frost corruption draws from (frost6.jpg
// exists upstream but is never used).
var frostFiles = []string{"frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"}

// frostDir returns the folder holding the frost overlays: flagValue (a
// --frost flag) if set, else $SUBTTA_FROST, else the overlays the binary
// embeds (builtin.FrostFiles: hendrycks/robustness's, unchanged), written
// once into <cache>/builtin/frost. A folder given by flag or environment
// must hold all five.
func frostDir(flagValue string) (string, error) {
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
	dir, err := builtin.ExtractFrost(filepath.Join(cache, "builtin"))
	if err != nil {
		return "", fmt.Errorf("frost overlays (or give --frost DIR or SUBTTA_FROST, a folder with %s): %w", strings.Join(frostFiles, ", "), err)
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
