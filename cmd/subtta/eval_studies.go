package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/eval"
	"github.com/subtta/subtta/internal/flagfile"
	"github.com/subtta/subtta/tta"
)

// studyFlags are eval's flags for the paper's studies: method options,
// prompt templates and class subsets.
type studyFlags struct {
	set        flagfile.KeyValues
	templates  stringList
	classes    *int
	classSeed  *uint64
	classNames *string
	list       *string
	order      *string
	wnids      *bool
}

func newStudyFlags(fs *pflag.FlagSet) *studyFlags {
	f := &studyFlags{}
	fs.Var(&f.set, "set", "method option METHOD.KEY=VALUE, repeated (METHOD: a method, or a family such as subtta for every subtta-*), e.g. subtta-m.rank=8, subtta.align=false, tent.lr=5e-4; subtta eval --options METHOD lists a method's")
	fs.Var(&f.templates, "templates", "prompt templates of every method, repeated: a template with {}, @FILE (one per line), or a set: "+strings.Join(tta.TemplateSetNames, ", "))
	f.order = fs.String("order", "", "file of sample indices giving every stream's order in place of the shuffle (each domain's, or the mixed pool; as long as the stream);\nnot with --no-shuffle, but under --protocol mixed, whose pool takes each domain's images shuffled, or in file order with it")
	f.wnids = fs.Bool("wnids", false, "print the wnids of the class folders of --dataset imagenet-r, imagenet-a or imagenet-k, one per line, and exit")
	f.list = fs.String("options", "", "list the options of a method (with its preset's values on --dataset) and exit")
	f.classes = fs.Int("classes", 0, "keep N classes (at least 2), drawn with --class-seed: the head and the images together (default: all)")
	f.classSeed = fs.Uint64("class-seed", 0, "seed of the classes --classes draws (only with --classes)")
	f.classNames = fs.String("class-names", "", "keep these classes (at least 2): comma-separated names, or @FILE with one per line")
	return f
}

// apply sets the study flag name (given on the command line) in cfg; it
// ignores other flags.
func (f *studyFlags) apply(name string, cfg *eval.Config) error {
	switch name {
	case "set":
		// One option given twice is refused, as a method given twice in
		// --methods is: which was meant is not for eval to guess. (Over a
		// results folder's --config, the flag's options take the place of
		// the folder's of the same key.)
		given := map[string]string{} // METHOD.KEY → the entry that gave it
		for _, s := range f.set {
			if err := cfg.MethodOptions.Add(s); err != nil {
				return err
			}
			key, _, _ := strings.Cut(s, "=")
			if prev, ok := given[key]; ok {
				return fmt.Errorf("%q: option %q given twice (first as %q)", s, key, prev)
			}
			given[key] = s
		}
	case "templates":
		cfg.Templates = nil
		for _, t := range f.templates {
			rest, ok := strings.CutPrefix(t, "@")
			if !ok {
				cfg.Templates = append(cfg.Templates, t)
				continue
			}
			lines, err := data.ReadLines(rest)
			if err != nil {
				return err
			}
			if len(lines) == 0 {
				return fmt.Errorf("%s holds no template", rest)
			}
			cfg.Templates = append(cfg.Templates, lines...)
		}
	case "classes":
		cfg.Classes = *f.classes
		if cfg.Classes < 2 {
			return fmt.Errorf("%d: want at least 2 classes (one is always right)", cfg.Classes)
		}
	case "order":
		cfg.Order = *f.order
	case "class-seed":
		cfg.ClassSeed = *f.classSeed
	case "class-names":
		names := splitList(*f.classNames)
		if rest, ok := strings.CutPrefix(*f.classNames, "@"); ok {
			lines, err := data.ReadLines(rest)
			if err != nil {
				return err
			}
			names = lines
		}
		if len(names) == 0 {
			return fmt.Errorf("%q: no class", *f.classNames)
		}
		if !strings.HasPrefix(*f.classNames, "@") {
			if _, err := listFlag(*f.classNames, "class"); err != nil {
				return err
			}
		}
		if err := noDuplicates(*f.classNames, "class", names); err != nil {
			return err
		}
		if len(names) < 2 {
			return fmt.Errorf("%q: want at least 2 classes (one is always right)", *f.classNames)
		}
		cfg.ClassNames = names
	}
	return nil
}

// printOptions lists the options of a method with their values in its
// preset for dataset, in its episodic form (tta.Preset.ForEpisodic: batch
// size 1, SubTTA's feature bank) under the episodic protocol, as a run
// of that protocol takes it.
func printOptions(w io.Writer, dataset, protocol, method string) error {
	p, err := tta.Lookup(dataset, method)
	if err != nil {
		return usagef("%v", err) // a method or dataset no run takes, as eval.Config.Check refuses them
	}
	under := ""
	if protocol == "episodic" {
		if p, err = p.ForEpisodic(); err != nil {
			return usagef("--protocol episodic: %v", err)
		}
		under = ", episodic protocol"
	}
	fmt.Fprintf(w, "%s on %s%s: --set %s.KEY=VALUE\n", method, dataset, under, method)
	for _, o := range p.Options() {
		fmt.Fprintf(w, "  %-22s %-10s %s (%s)\n", o.Key, o.Value(p), o.About, o.Allowed)
	}
	return nil
}

// printWNIDs lists the class folders an ImageNet variant's tree has.
func printWNIDs(w io.Writer, dataset string) error {
	keep, err := data.ImageNetVariantClasses(dataset)
	if err != nil {
		return usagef("--wnids: %v", err)
	}
	for _, k := range keep {
		fmt.Fprintln(w, data.ImageNetWNIDs[k])
	}
	return nil
}
