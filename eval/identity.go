package eval

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/subtta/subtta/internal/atomicfile"
)

// identity is what the stored results of a folder depend on: a folder
// made with another identity is not resumed. Inputs are identified by
// content, not by the path they were given by: the same data named by an
// absolute path is the same run, another model saved at the same path is
// not.
type identity struct {
	Model       string `json:"model"` // fingerprint of the checkpoint (see Options.ModelID)
	ModelConfig string `json:"model_config"`
	// Precision names the linear layers' arithmetic and the kernel's where
	// it differs (kernel.Choice.ID); "" for fp32, so that the records of
	// earlier builds keep their digests.
	Precision string `json:"precision,omitempty"`
	// DevicePrecision is Options.DevicePrecision; "" for a run on the CPU
	// or a device's float32, so that earlier records keep their digests.
	DevicePrecision string `json:"device_precision,omitempty"`
	Tokenizer       string `json:"tokenizer"` // fingerprint of the vocabulary, or the tokenizer's kind
	Dataset         string `json:"dataset"`
	Data            string `json:"data"`   // fingerprint of the data's files, contents included
	Labels          string `json:"labels"` // fingerprint of the label files, if given
	SubsetList      string `json:"subset_list"`
	Frost           string `json:"frost"` // fingerprint of the frost overlays, when frost is made on the fly
	Limit           int    `json:"limit"`
	BatchSize       int    `json:"batch_size"`
	Views           int    `json:"views,omitempty"`
	Protocol        string `json:"protocol"`
	NoShuffle       bool   `json:"no_shuffle"`
	Seed            uint64 `json:"seed"`
	CorruptSeed     uint64 `json:"corrupt_seed"`
	// Options are the method options given (optionsIdentity), Templates
	// the templates given to every method, Classes the classes kept and
	// Order the stream order's file; empty when the run uses the presets',
	// every class and the shuffle, so that the
	// records of earlier builds keep their digests.
	Options   string `json:"options,omitempty"`
	Templates string `json:"templates,omitempty"`
	Classes   string `json:"classes,omitempty"`
	Order     string `json:"order,omitempty"` // fingerprint of Config.Order's file
}

// merge compares id, this run's identity, with old, that of the results
// folder, and returns id completed from old and a description of how they
// differ ("" when they agree). An input that one of the runs did not use
// is no difference: a run without frost resumes a folder that holds
// frost, and keeps old's overlays on record for a later run that makes
// frost again.
func (id identity) merge(old identity) (identity, string) {
	// A folder written before the precision had a field of its own named it
	// in the model's: it is the same run, and keeps its records' digests.
	if old.Precision == "" && id.Precision != "" && old.Model == id.Model+legacyPrecision+id.Precision {
		id.Model, id.Precision = old.Model, ""
	}
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

// legacyPrecision joined the model's fingerprint and the precision in the
// identity of earlier builds.
const legacyPrecision = ", linear layers in "

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

// maxHashedBytes bounds how much of one file is read for its fingerprint
// when no hash cache is used (a checkpoint, ModelFingerprint); past it,
// the file is identified by its size and its first and last
// maxHashedBytes/2 bytes. With a cache, whole files are hashed.
const maxHashedBytes = 1 << 30

// fingerprint identifies the contents of path: for a file, its size and
// SHA-256 (see maxHashedBytes); for a folder, the sorted list of its files
// with their sizes and contents. Files are hashed through cache, when not
// nil. The result is "" for an empty path.
func fingerprint(path string, cache *hashCache) (string, error) {
	if path == "" {
		return "", nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("eval: %w", err)
	}
	if !st.IsDir() {
		sum, err := cache.hash(path, st)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d bytes, sha256 %s", st.Size(), sum[:16]), nil
	}
	files, err := folderFiles(path)
	if err != nil {
		return "", err
	}
	// Folder by folder, so that the cache holds one entry per folder.
	byDir := map[string][]folderFile{}
	var total int64
	for _, f := range files {
		d := filepath.Dir(f.path)
		byDir[d] = append(byDir[d], f)
		total += f.info.Size()
	}
	h := sha256.New()
	for _, d := range slices.Sorted(maps.Keys(byDir)) {
		sum, err := cache.folderHash(d, byDir[d])
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(path, d)
		fmt.Fprintf(h, "%s\x00%s\x00", filepath.ToSlash(rel), sum)
	}
	return fmt.Sprintf("%d files, %d bytes, sha256 %s", len(files), total, hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// A folderFile is a regular file of a folder, by its path relative to the
// folder with forward slashes.
type folderFile struct {
	path, rel string
	info      fs.FileInfo
}

// folderFiles lists the regular files under dir, sorted by path.
func folderFiles(dir string) ([]folderFile, error) {
	var files []folderFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, folderFile{p, filepath.ToSlash(rel), info})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	slices.SortFunc(files, func(a, b folderFile) int { return strings.Compare(a.path, b.path) })
	return files, nil
}

// namesFingerprint is how builds before content hashing identified a data
// folder: its files' names and sizes. It is compared only with the
// run.json of such a build (see compareRunFile).
func namesFingerprint(dir string) (string, error) {
	files, err := folderFiles(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	var total int64
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.rel, f.info.Size())
		total += f.info.Size()
	}
	return fmt.Sprintf("%d files, %d bytes, sha256 %s", len(files), total, hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// legacyDataFingerprint is how builds before content hashing identified
// the data at path: a folder by its files' names and sizes
// (namesFingerprint), a file as fingerprint does without a cache.
func legacyDataFingerprint(path string) (string, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return namesFingerprint(path)
	}
	return fingerprint(path, nil)
}

// hashFile adds the contents of a file of the given size to h; with
// partial, only its first and last maxHashedBytes/2 bytes when it is
// larger than maxHashedBytes.
func hashFile(h io.Writer, path string, size int64, partial bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	if !partial || size <= maxHashedBytes {
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

// fingerprintCacheFile, in a results folder, holds the SHA-256s of the
// data the folder's last run hashed (see hashCache), so that a rerun reads
// none of its files again.
const fingerprintCacheFile = ".fingerprints.json"

// A hashCache remembers SHA-256s of a run's data: of a file by its absolute
// path, size and modification time; of a folder's files (not its
// subfolders) by the folder's absolute path and a digest of its files'
// names, sizes and modification times, one entry per folder, so that the
// cache of millions of images stays small. Files that keep all three are
// taken to keep their contents, as make and rsync assume: fingerprinting a
// data set of 10,000 images reads them once, not at every run. A nil
// *hashCache caches nothing and hashes big files partially
// (maxHashedBytes).
type hashCache struct {
	path string
	old  map[string]string // read from path
	used map[string]string // looked up or computed by this run: what save keeps
}

// loadHashCache reads the cache at path; a missing or unreadable file is
// an empty cache (the cache only saves time).
func loadHashCache(path string) *hashCache {
	c := &hashCache{path: path, old: map[string]string{}, used: map[string]string{}}
	if b, err := os.ReadFile(path); err == nil {
		if json.Unmarshal(b, &c.old) != nil {
			c.old = map[string]string{}
		}
	}
	return c
}

// lookup returns the cached sum under key, or computes it.
func (c *hashCache) lookup(key string, compute func() (string, error)) (string, error) {
	if c != nil {
		if sum, ok := c.old[key]; ok {
			c.used[key] = sum
			return sum, nil
		}
	}
	sum, err := compute()
	if err == nil && c != nil {
		c.used[key] = sum
	}
	return sum, err
}

// key is the cache key of what is at path, under the given kind and
// stamp; "" without a cache.
func (c *hashCache) key(kind, path, stamp string) (string, error) {
	if c == nil {
		return "", nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("eval: %w", err)
	}
	return kind + " " + filepath.ToSlash(abs) + " " + stamp, nil
}

// hash returns the hex SHA-256 of the file at path, whose FileInfo is st.
func (c *hashCache) hash(path string, st fs.FileInfo) (string, error) {
	key, err := c.key("file", path, fmt.Sprintf("%d %d", st.Size(), st.ModTime().UnixNano()))
	if err != nil {
		return "", err
	}
	return c.lookup(key, func() (string, error) {
		h := sha256.New()
		if err := hashFile(h, path, st.Size(), c == nil); err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	})
}

// folderHash returns the hex SHA-256 of the names, sizes and contents of
// files, the files of folder dir (not of its subfolders).
func (c *hashCache) folderHash(dir string, files []folderFile) (string, error) {
	stamp := sha256.New()
	for _, f := range files {
		fmt.Fprintf(stamp, "%s\x00%d\x00%d\x00", filepath.Base(f.path), f.info.Size(), f.info.ModTime().UnixNano())
	}
	key, err := c.key("folder", dir, hex.EncodeToString(stamp.Sum(nil))[:32])
	if err != nil {
		return "", err
	}
	return c.lookup(key, func() (string, error) {
		h := sha256.New()
		for _, f := range files {
			fh := sha256.New()
			if err := hashFile(fh, f.path, f.info.Size(), c == nil); err != nil {
				return "", err
			}
			fmt.Fprintf(h, "%s\x00%d\x00%x\x00", filepath.Base(f.path), f.info.Size(), fh.Sum(nil))
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	})
}

// save writes the entries this run used; a failure costs only time at the
// next run, and is returned for the log.
func (c *hashCache) save() error {
	b, err := json.Marshal(c.used)
	if err != nil {
		return err
	}
	return atomicfile.Write(c.path, b)
}

// Fingerprint identifies a file or a folder by its contents, as a results
// folder's run.json does for a run's inputs (a file over maxHashedBytes by
// its size and its ends).
func Fingerprint(path string) (string, error) { return fingerprint(path, nil) }

// ModelFingerprint identifies a checkpoint (a file, or a folder in the
// Hugging Face layout) by its contents, for Options.ModelID.
func ModelFingerprint(path string) (string, error) { return fingerprint(path, nil) }

// frostFingerprint identifies the five overlays in dir.
func frostFingerprint(dir string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg"} {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("eval: frost overlays: %w", err)
		}
		if err := hashFile(h, p, st.Size(), true); err != nil {
			return "", err
		}
	}
	return "sha256 " + hex.EncodeToString(h.Sum(nil))[:16], nil
}
