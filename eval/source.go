package eval

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
	"github.com/subtta/subtta/tta"
)

// cifar10Classes name CIFAR-10-C's labels, which its files do not carry.
var cifar10Classes = data.CIFAR10Classes

// source opens the domains of a run: from the benchmark's own files
// (CIFAR-10/100-C .npy, ImageNet-C folders) or by corrupting a clean test
// set on the fly.
type source struct {
	kind    string // "cifar-c", "imagenet-c" or "clean"
	classes []string
	clean   data.Dataset // kind "clean"
	preset  corrupt.Preset
	cfg     Config
	frost   func() (string, error) // finds the frost overlays when needed
	// allClasses are the data's classes when the run keeps only those of
	// keep (Config.Classes, restrictClasses); classes are then the kept.
	allClasses []string
	keep       []int
}

func (s *source) Close() error {
	if s.clean != nil {
		return s.clean.Close()
	}
	return nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// openSource inspects cfg.Data and decides where the images come from.
func openSource(cfg Config) (*source, error) { return openSourceFor(cfg, nil) }

// openSourceFor is openSource for a model that records the class names it
// was trained with (clip.Model.Classes): without cfg.Labels, they name the
// classes of data that names none (CIFAR-C and ImageNet-C files, clean
// ImageNet), in the order of the labels.
func openSourceFor(cfg Config, modelClasses []string) (*source, error) {
	if !exists(cfg.Data) {
		return nil, fmt.Errorf("eval: data %s: no such file or folder", cfg.Data)
	}
	s := &source{cfg: cfg, preset: corrupt.CIFAR}
	var labels *data.Labels
	if cfg.Labels != "" {
		set := map[string]string{"cifar10-c": "cifar10", "cifar100-c": "cifar100", "imagenet-c": "imagenet"}[tta.PresetDataset(cfg.Dataset)]
		l, err := data.ReadLabels(cfg.Labels, set)
		if err != nil {
			return nil, fmt.Errorf("eval: labels: %w", err)
		}
		labels = l
	}
	if isVariant(cfg.Dataset) {
		if labels == nil {
			return nil, fmt.Errorf("eval: %s needs ImageNet's class names: give --labels, a folder with imagenet_classes_openai.txt", cfg.Dataset)
		}
		ds, err := data.OpenImageNetVariant(cfg.Data, cfg.Dataset, labels.Classes)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		s.kind, s.clean, s.classes = "variant", ds, ds.Classes()
		return s, nil
	}
	if cfg.Dataset == "imagenet-c" {
		s.preset = corrupt.ImageNet
		if labels == nil && len(modelClasses) > 0 {
			labels = &data.Labels{Classes: modelClasses}
		}
		if labels == nil {
			return nil, fmt.Errorf("eval: ImageNet needs class names: give --labels, a folder with imagenet_classes_openai.txt")
		}
		s.classes = labels.Classes
		if isDir(filepath.Join(cfg.Data, cfg.Corruptions[0])) {
			s.kind = "imagenet-c"
			return s, nil
		}
		ds, err := data.OpenImageNetFolder(cfg.Data, data.ImageNetOptions{Classes: labels.Classes, SubsetList: cfg.SubsetList})
		if err != nil && !hasCorruptionFolder(cfg.Data) {
			if cerr := classFoldersError(cfg.Data, len(labels.Classes)); cerr != nil {
				return nil, cerr
			}
		}
		if err != nil {
			return nil, fmt.Errorf("eval: %s is neither ImageNet-C (no %s folder) nor a clean ImageNet folder: %w", cfg.Data, cfg.Corruptions[0], err)
		}
		s.kind, s.clean = "clean", ds
		return s, nil
	}

	// CIFAR-10-C / CIFAR-100-C.
	if isDir(cfg.Data) && exists(filepath.Join(cfg.Data, "labels.npy")) {
		s.kind = "cifar-c"
		switch {
		case labels != nil:
			s.classes = labels.Classes
		case len(modelClasses) > 0:
			s.classes = modelClasses
		case cfg.Dataset == "cifar10-c":
			s.classes = cifar10Classes
		default:
			return nil, fmt.Errorf("eval: CIFAR-100-C files carry no class names: give --labels, a folder with cifar100_classes.txt")
		}
		return s, nil
	}
	open := data.OpenCIFAR10
	if cfg.Dataset == "cifar100-c" {
		open = data.OpenCIFAR100
	}
	ds, errBin := open(cfg.Data, data.Test)
	if errBin == nil {
		if labels != nil {
			if len(labels.Classes) != len(ds.Classes()) {
				ds.Close()
				return nil, fmt.Errorf("eval: labels: %d classes, the CIFAR files have %d", len(labels.Classes), len(ds.Classes()))
			}
			s.classes = labels.Classes
		} else {
			s.classes = ds.Classes()
		}
		s.kind, s.clean = "clean", ds
		return s, nil
	}
	var opts data.FolderOptions
	if labels != nil {
		opts.Classes = labels.Classes
	}
	fd, errFolder := data.OpenFolder(cfg.Data, opts)
	if errFolder != nil {
		return nil, fmt.Errorf("eval: %s: not %s files (no labels.npy), not CIFAR binaries (%v), not an image folder (%w)",
			cfg.Data, map[string]string{"cifar10-c": "CIFAR-10-C", "cifar100-c": "CIFAR-100-C"}[cfg.Dataset], errBin, errFolder)
	}
	s.kind, s.clean, s.classes = "clean", fd, fd.Classes()
	return s, nil
}

// open returns the dataset of one corruption at one severity.
func (s *source) open(name string, severity int) (data.Dataset, error) {
	if name == Clean && s.kind != "clean" {
		return nil, fmt.Errorf("eval: %s: the %s domain needs a clean test set, not the corrupted benchmark's files", s.cfg.Data, Clean)
	}
	switch s.kind {
	case "cifar-c":
		return data.OpenCIFARC(s.cfg.Data, name, severity, s.classes)
	case "imagenet-c":
		ds, err := data.OpenImageNetC(s.cfg.Data, name, severity, data.ImageNetOptions{Classes: s.classes, SubsetList: s.cfg.SubsetList})
		if err != nil {
			if cerr := classFoldersError(filepath.Join(s.cfg.Data, name, strconv.Itoa(severity)), len(s.classes)); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
		return ds, nil
	case "variant":
		if name != s.cfg.Dataset {
			return nil, fmt.Errorf("eval: %s has no domain %q", s.cfg.Dataset, name)
		}
		return unclosed{s.clean}, nil
	case "clean":
		if name == Clean {
			return unclosed{s.clean}, nil
		}
		if name == "frost" && s.cfg.FrostDir == "" {
			if s.frost == nil {
				return nil, errors.New("eval: frost needs the frost overlays: give --frost DIR (frost1.png … frost5.jpg)")
			}
			dir, err := s.frost()
			if err != nil {
				return nil, fmt.Errorf("eval: frost overlays: %w", err)
			}
			s.cfg.FrostDir = dir
		}
		return corruptOnTheFly(s.clean, name, severity, corrupt.Config{Preset: s.preset, FrostDir: s.cfg.FrostDir}, s.cfg.CorruptSeed)
	}
	return nil, fmt.Errorf("eval: unknown source %q", s.kind)
}

// classFoldersError is the error, in eval's terms, for an ImageNet tree
// dir that holds another number of class folders than the classes it is
// read with (the folders, sorted, are taken in the order of the classes),
// nil when the counts agree: data's advice, a wnid list, has no flag in
// eval.
func classFoldersError(dir string, classes int) error {
	dirs, err := data.ClassDirs(dir)
	if err != nil {
		return nil
	}
	folders := len(dirs)
	if folders == 0 || folders == classes {
		return nil
	}
	return fmt.Errorf("eval: %s: %d class folders for the %d classes of the labels (--labels, or the model's): the folders, sorted by name, are taken as the classes in order;"+
		" for a tree of %d classes give --labels a folder whose imagenet_classes_openai.txt names those %d in the order of their folders,"+
		" or use the tree of all %d and keep fewer with --classes or --class-names", dir, folders, classes, folders, folders, classes)
}

// hasCorruptionFolder reports whether the folder dir holds a folder named
// after a corruption: ImageNet-C rather than a tree of class folders.
func hasCorruptionFolder(dir string) bool {
	for _, c := range corrupt.Names() {
		if isDir(filepath.Join(dir, c)) {
			return true
		}
	}
	return false
}

// describe says in a few words where the images come from.
func (s *source) describe() string {
	switch s.kind {
	case "cifar-c":
		return "CIFAR-C files in " + s.cfg.Data
	case "imagenet-c":
		return "ImageNet-C folders in " + s.cfg.Data
	case "variant":
		return fmt.Sprintf("%s in %s (%d images of %d classes)", s.cfg.Dataset, s.cfg.Data, s.clean.Len(), len(s.classes))
	}
	return fmt.Sprintf("%s (%d images), corrupted on the fly with the %s parameters", s.clean.Name(), s.clean.Len(), s.preset)
}

// unclosed is a dataset whose Close leaves the underlying one open: the
// clean domain shares the source's dataset, which the source closes.
type unclosed struct{ data.Dataset }

func (unclosed) Close() error { return nil }
