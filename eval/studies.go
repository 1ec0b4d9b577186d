package eval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/tta"
)

// MethodOptions are method options by name (tta.Preset.Set): under a
// selector, key → value. A selector is a method's name, which sets the
// options of that method, or a family's, the part of method names before
// a "-" ("subtta" sets every subtta-*, "watt" both WATTs, "mint" both
// MINTs); a method's own name wins over its family. In a config file the
// values may be JSON strings, numbers or booleans:
//
//	"method_options": {"subtta": {"rank": 8}, "tent": {"lr": 0.0005}}
type MethodOptions map[string]map[string]string

// UnmarshalJSON reads the values as strings, numbers or booleans.
func (o *MethodOptions) UnmarshalJSON(b []byte) error {
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := MethodOptions{}
	for sel, kv := range raw {
		out[sel] = map[string]string{}
		for k, v := range kv {
			var s string
			if json.Unmarshal(v, &s) == nil {
				out[sel][k] = s
				continue
			}
			t := string(bytes.TrimSpace(v))
			if _, err := strconv.ParseFloat(t, 64); err != nil && t != "true" && t != "false" {
				return fmt.Errorf("method_options %s.%s: %s is not a string, number or boolean", sel, k, t)
			}
			out[sel][k] = t
		}
	}
	*o = out
	return nil
}

// Add sets an option from "SELECTOR.KEY=VALUE", as `--set` gives it.
func (o *MethodOptions) Add(arg string) error {
	lhs, value, ok := strings.Cut(arg, "=")
	sel, key, dot := strings.Cut(lhs, ".")
	if !ok || !dot || sel == "" || key == "" {
		return fmt.Errorf("%q: want METHOD.KEY=VALUE, such as subtta-m.rank=8", arg)
	}
	if *o == nil {
		*o = MethodOptions{}
	}
	if (*o)[sel] == nil {
		(*o)[sel] = map[string]string{}
	}
	(*o)[sel][key] = value
	return nil
}

// selects reports whether the selector sel names method (its name, or its
// family: the name up to a "-").
func selects(sel, method string) bool {
	return sel == method || strings.HasPrefix(method, sel+"-")
}

// forMethod returns the options that apply to method: its family's, then
// its own over them.
func (o MethodOptions) forMethod(method string) map[string]string {
	out := map[string]string{}
	var sels []string
	for _, s := range slices.Sorted(maps.Keys(o)) {
		if selects(s, method) {
			sels = append(sels, s)
		}
	}
	// Shorter selectors (families) first, the method's own name last.
	slices.SortStableFunc(sels, func(a, b string) int { return len(a) - len(b) })
	for _, s := range sels {
		for k, v := range o[s] {
			out[k] = v
		}
	}
	return out
}

// source returns the option key of method as the options give it: the
// selector that gives it (the method's own name over its family's, as
// forMethod) and its value; ok is false when none gives it.
func (o MethodOptions) source(method, key string) (sel, value string, ok bool) {
	for s, kv := range o {
		v, has := kv[key]
		if has && selects(s, method) && (!ok || len(s) > len(sel)) {
			sel, value, ok = s, v, true
		}
	}
	return sel, value, ok
}

// overridden says where a method option takes the place of BatchSize or
// Views, which set every method's: the option, which names the method,
// wins (Config.preset). Run logs each as a warning naming both, since the
// flag alone would say another value.
func (c Config) overridden() []string {
	var out []string
	for _, m := range c.Methods {
		for _, f := range []struct {
			flag, key string
			v         int
		}{{"--batch-size", "batch_size", c.BatchSize}, {"--views", "views", c.Views}} {
			if f.v <= 0 {
				continue
			}
			if sel, v, ok := c.MethodOptions.source(m, f.key); ok {
				out = append(out, fmt.Sprintf("warning: %s %d and --set %s.%s=%s both give %s's %s: %s runs with %s, the --set's (a method's option wins over the flag for every method)",
					f.flag, f.v, sel, f.key, v, m, f.key, m, v))
			}
		}
	}
	return out
}

// check refuses a selector that names no method of the run.
func (o MethodOptions) check(methods []string) error {
	for _, s := range slices.Sorted(maps.Keys(o)) {
		if !slices.ContainsFunc(methods, func(m string) bool { return selects(s, m) }) {
			return fmt.Errorf("eval: method options for %q: no method of this run is %s or %s-* (methods: %s)", s, s, s, strings.Join(methods, ", "))
		}
	}
	return nil
}

// applyOptions sets the options of method on p: the optimizer's kind
// first (the options of Adam or SGD depend on it), then the others by key.
func applyOptions(p *tta.Preset, opts map[string]string) error {
	keys := slices.Sorted(maps.Keys(opts))
	slices.SortStableFunc(keys, func(a, b string) int {
		return boolInt(b == "optimizer") - boolInt(a == "optimizer")
	})
	for _, k := range keys {
		if err := p.Set(k, opts[k]); err != nil {
			return fmt.Errorf("eval: %w", err)
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resolvedOptions returns, for each method of the run that has options,
// the options given with the values the preset holds after setting them
// (so that "8" and "8.0" are one setting): what the run's identity and
// each record carry.
func (c Config) resolvedOptions() (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, m := range c.Methods {
		given := c.MethodOptions.forMethod(m)
		if len(given) == 0 {
			continue
		}
		p, err := c.preset(m)
		if err != nil {
			return nil, err
		}
		vals := p.OptionValues()
		out[m] = map[string]string{}
		for k := range given {
			out[m][k] = vals[k]
		}
	}
	return out, nil
}

// optionsIdentity is the run's method options in one line, sorted:
// "subtta-m: alpha=0.3, rank=8; tent: lr=0.0005"; "" when none.
func optionsIdentity(opts map[string]map[string]string) string {
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(opts)) {
		var kv []string
		for k, v := range opts[m] {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		parts = append(parts, m+": "+strings.Join(kv, ", "))
	}
	return strings.Join(parts, "; ")
}

// resolveTemplates expands Config.Templates: each entry is a template
// (with "{}") or the name of a set (tta.TemplateSet). Nil when none are
// given (each preset's own).
func (c Config) resolveTemplates() ([]string, error) {
	var out []string
	for _, t := range c.Templates {
		if strings.Contains(t, "{}") {
			out = append(out, t)
			continue
		}
		set, err := tta.TemplateSet(t)
		if err != nil {
			return nil, fmt.Errorf("eval: templates: %w", err)
		}
		out = append(out, set...)
	}
	return out, nil
}

// templatesIdentity identifies the templates a run gives every method.
func templatesIdentity(templates []string) string {
	if len(templates) == 0 {
		return ""
	}
	h := sha256.Sum256([]byte(strings.Join(templates, "\n")))
	return fmt.Sprintf("%d templates, sha256 %s", len(templates), hex.EncodeToString(h[:8]))
}

// classSubset returns the indices (ascending) of the classes the run keeps
// among all: the names of Config.ClassNames, or Config.Classes drawn with
// Config.ClassSeed; nil when the run keeps every class.
func (c Config) classSubset(all []string) ([]int, error) {
	switch {
	case len(c.ClassNames) > 0 && c.Classes > 0:
		return nil, fmt.Errorf("eval: give either a number of classes (%d) or class names (%d of them), not both", c.Classes, len(c.ClassNames))
	case len(c.ClassNames) > 0:
		var keep []int
		for _, n := range c.ClassNames {
			i := slices.Index(all, n)
			if i < 0 {
				return nil, fmt.Errorf("eval: class %q is not one of the dataset's %d classes", n, len(all))
			}
			if slices.Contains(keep, i) {
				return nil, fmt.Errorf("eval: class %q given twice", n)
			}
			keep = append(keep, i)
		}
		slices.Sort(keep)
		return keep, nil
	case c.Classes > 0:
		if c.Classes > len(all) {
			return nil, fmt.Errorf("eval: %d classes asked for, the dataset has %d", c.Classes, len(all))
		}
		return DrawClasses(len(all), c.Classes, c.ClassSeed), nil
	}
	return nil, nil
}

// DrawClasses draws n of total classes with seed, as `--classes N
// --class-seed S` does: the first n of a permutation of 0…total−1 by
// math/rand/v2's PCG seeded with (seed, 0), sorted ascending.
func DrawClasses(total, n int, seed uint64) []int {
	perm := rand.New(rand.NewPCG(seed, 0)).Perm(total)
	keep := slices.Clone(perm[:n])
	slices.Sort(keep)
	return keep
}

// classesIdentity identifies the kept classes by their names.
func classesIdentity(names []string, total int) string {
	if len(names) == total {
		return ""
	}
	h := sha256.Sum256([]byte(strings.Join(names, "\n")))
	return fmt.Sprintf("%d of %d classes, sha256 %s", len(names), total, hex.EncodeToString(h[:8]))
}

// restrictClasses narrows the source to the kept classes (classSubset):
// the head's class names now, every domain's images when it opens.
func (s *source) restrictClasses(cfg Config) error {
	keep, err := cfg.classSubset(s.classes)
	if err != nil || keep == nil {
		return err
	}
	s.allClasses = s.classes
	s.keep = keep
	names := make([]string, len(keep))
	for i, k := range keep {
		names[i] = s.classes[k]
	}
	s.classes = names
	return nil
}

// subset restricts a domain's dataset to the kept classes, if any.
func (s *source) subset(ds data.Dataset) data.Dataset {
	if s.keep == nil {
		return ds
	}
	return data.ClassSubset(ds, s.keep)
}

// sampleOrder is Config.Order's file read: the sample indices in order,
// with the line of the file each is on, for errors that point at it.
type sampleOrder struct {
	path  string
	index []int
	line  []int
}

// readOrder reads Config.Order, nil when none is given: whitespace-separated
// sample indices (as online.ReadOrder reads them), each given once.
func (c Config) readOrder() (*sampleOrder, error) {
	if c.Order == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.Order)
	if err != nil {
		return nil, fmt.Errorf("eval: order: %w", err)
	}
	o := &sampleOrder{path: c.Order}
	first := map[int]int{} // sample index → its line
	for n, l := range strings.Split(string(b), "\n") {
		for _, f := range strings.Fields(l) {
			v, err := strconv.Atoi(f)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("eval: order file %s: line %d: %q is not a sample index (a non-negative integer)", c.Order, n+1, f)
			}
			if at, dup := first[v]; dup {
				return nil, fmt.Errorf("eval: order file %s: sample index %d is given twice (lines %d and %d): an order gives each sample once", c.Order, v, at, n+1)
			}
			first[v] = n + 1
			o.index, o.line = append(o.index, v), append(o.line, n+1)
		}
	}
	if len(o.index) == 0 {
		return nil, fmt.Errorf("eval: order file %s: no sample index", c.Order)
	}
	return o, nil
}

// streamOrder is the runner's Order for a fixed order: the same for every
// stream, which must be as long; its indices, each given once (readOrder),
// are then a permutation of the stream's.
func streamOrder(order *sampleOrder) func(string, int) ([]int, error) {
	if order == nil {
		return nil
	}
	return func(stream string, n int) ([]int, error) {
		if n != len(order.index) {
			return nil, fmt.Errorf("eval: order file %s has %d entries, stream %s has %d samples", order.path, len(order.index), stream, n)
		}
		for i, v := range order.index {
			if v >= n {
				return nil, fmt.Errorf("eval: order file %s: line %d: sample index %d is beyond stream %s, whose samples are 0…%d", order.path, order.line[i], v, stream, n-1)
			}
		}
		return slices.Clone(order.index), nil
	}
}
