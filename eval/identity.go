package eval

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// identity is what the stored results of a folder depend on: a folder
// made with another identity is not resumed. Inputs are identified by
// content, not by the path they were given by: the same data named by an
// absolute path is the same run, another model saved at the same path is
// not.
type identity struct {
	Model       string `json:"model"` // fingerprint of the checkpoint (see Options.ModelID)
	ModelConfig string `json:"model_config"`
	Tokenizer   string `json:"tokenizer"` // fingerprint of the vocabulary, or the tokenizer's kind
	Dataset     string `json:"dataset"`
	Data        string `json:"data"`   // fingerprint of the data's files
	Labels      string `json:"labels"` // fingerprint of the label files, if given
	SubsetList  string `json:"subset_list"`
	Frost       string `json:"frost"` // fingerprint of the frost overlays, when frost is made on the fly
	Limit       int    `json:"limit"`
	BatchSize   int    `json:"batch_size"`
	Protocol    string `json:"protocol"`
	NoShuffle   bool   `json:"no_shuffle"`
	Seed        uint64 `json:"seed"`
	CorruptSeed uint64 `json:"corrupt_seed"`
}

// merge compares id, this run's identity, with old, that of the results
// folder, and returns id completed from old and a description of how they
// differ ("" when they agree). An input that one of the runs did not use
// is no difference: a run without frost resumes a folder that holds
// frost, and keeps old's overlays on record for a later run that makes
// frost again.
func (id identity) merge(old identity) (identity, string) {
	if id.Frost == "" {
		id.Frost = old.Frost
	} else if old.Frost == "" {
		old.Frost = id.Frost
	}
	if id == old {
		return id, ""
	}
	return id, identityDiff(old, id)
}

// digest identifies the run as far as a record of the given corruption
// depends on it (report.Record.Run): the frost overlays count only for
// frost.
func (id identity) digest(corruption string) string {
	if corruption != "frost" {
		id.Frost = ""
	}
	b, _ := json.Marshal(id) // cannot fail: strings, numbers and a bool
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// maxHashedBytes bounds how much of one file is read for its fingerprint;
// past it, the file is identified by its size and its first and last
// maxHashedBytes/2 bytes.
const maxHashedBytes = 1 << 30

// fingerprint identifies the contents of path: for a file, its size and
// SHA-256 (see maxHashedBytes); for a folder, the sorted list of its files
// with their sizes (enough for a data set of many images) and, when
// contents is set (a checkpoint folder), their contents too. The result is
// "" for an empty path.
func fingerprint(path string, contents bool) (string, error) {
	if path == "" {
		return "", nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("eval: %w", err)
	}
	h := sha256.New()
	if !st.IsDir() {
		if err := hashFile(h, path, st.Size()); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d bytes, sha256 %s", st.Size(), hex.EncodeToString(h.Sum(nil))[:16]), nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("eval: %w", err)
	}
	slices.Sort(files)
	var total int64
	for _, p := range files {
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("eval: %w", err)
		}
		rel, _ := filepath.Rel(path, p)
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), st.Size())
		if contents {
			if err := hashFile(h, p, st.Size()); err != nil {
				return "", err
			}
		}
		total += st.Size()
	}
	return fmt.Sprintf("%d files, %d bytes, sha256 %s", len(files), total, hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// hashFile adds the contents of a file of the given size to h.
func hashFile(h io.Writer, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	if size <= maxHashedBytes {
		_, err = io.Copy(h, f)
	} else {
		half := int64(maxHashedBytes / 2)
		if _, err = io.Copy(h, io.NewSectionReader(f, 0, half)); err == nil {
			_, err = io.Copy(h, io.NewSectionReader(f, size-half, half))
		}
	}
	if err != nil {
		return fmt.Errorf("eval: %s: %w", path, err)
	}
	return nil
}

// ModelFingerprint identifies a checkpoint (a file, or a folder in the
// Hugging Face layout) by its contents, for Options.ModelID.
func ModelFingerprint(path string) (string, error) { return fingerprint(path, true) }

// frostFingerprint identifies the five overlays in dir.
func frostFingerprint(dir string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"} {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("eval: frost overlays: %w", err)
		}
		if err := hashFile(h, p, st.Size()); err != nil {
			return "", err
		}
	}
	return "sha256 " + hex.EncodeToString(h.Sum(nil))[:16], nil
}
