package eval

import (
	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
)

// corruptOnTheFly wraps a clean dataset so that its images come out
// corrupted, seeded per image (see data.NewCorrupted).
func corruptOnTheFly(clean data.Dataset, name string, severity int, cfg corrupt.Config, seed uint64) (data.Dataset, error) {
	return data.NewCorrupted(clean, name, severity, cfg, seed)
}
