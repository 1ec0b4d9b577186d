package flagfile

import (
	"flag"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// Kind is how a file gives a flag's value, and how Write writes it.
type Kind int

const (
	// String flags take any scalar as written; a list only where the
	// flag's help says "comma-separated" (--methods source,tent), joined
	// with commas.
	String Kind = iota
	Bool
	Int
	Uint
	Float
	Duration
	// List flags are repeatable: a list sets them once per element.
	List
	// Map flags (KeyValues) take KEY=VALUE entries: nested blocks set
	// them once per leaf.
	Map
)

// Flag is a flag as a file sees it.
type Flag struct {
	Name, Usage string
	// DefValue is the default as the flag prints it.
	DefValue string
	Kind     Kind
	// Value is the current value: a bool, int64, uint64, float64 or
	// string (a Duration's string) by Kind, a []string for List and Map.
	Value any
}

// FlagSet is the flags of a command: GoFlags adapts the standard
// library's flag.FlagSet, PFlags pflag's (cobra's).
type FlagSet interface {
	// Name is the command's, for messages.
	Name() string
	// VisitAll calls fn for every flag, in the order help lists them.
	VisitAll(fn func(Flag))
	Lookup(name string) (Flag, bool)
	// Set sets a flag as its command-line argument would, marking it
	// changed.
	Set(name, value string) error
	// Changed reports whether the flag was set (on the command line, or
	// by Set).
	Changed(name string) bool
}

// GoFlags is fs as a FlagSet. A flag's Kind is that of the value its
// flag.Getter returns (the standard flags', a []string for List),
// Map for a KeyValues, String for a flag.Value without Get.
func GoFlags(fs *flag.FlagSet) FlagSet { return goFlags{fs} }

type goFlags struct{ fs *flag.FlagSet }

func (g goFlags) Name() string                 { return g.fs.Name() }
func (g goFlags) Set(name, value string) error { return g.fs.Set(name, value) }

func (g goFlags) VisitAll(fn func(Flag)) {
	g.fs.VisitAll(func(f *flag.Flag) { fn(goFlag(f)) })
}

func (g goFlags) Lookup(name string) (Flag, bool) {
	f := g.fs.Lookup(name)
	if f == nil {
		return Flag{}, false
	}
	return goFlag(f), true
}

func (g goFlags) Changed(name string) bool {
	changed := false
	g.fs.Visit(func(f *flag.Flag) { changed = changed || f.Name == name })
	return changed
}

func goFlag(f *flag.Flag) Flag {
	out := Flag{Name: f.Name, Usage: f.Usage, DefValue: f.DefValue, Kind: String, Value: f.Value.String()}
	if kv, ok := f.Value.(*KeyValues); ok {
		out.Kind, out.Value = Map, []string(*kv)
		return out
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return out
	}
	switch v := g.Get().(type) {
	case bool:
		out.Kind, out.Value = Bool, v
	case int:
		out.Kind, out.Value = Int, int64(v)
	case int64:
		out.Kind, out.Value = Int, v
	case uint:
		out.Kind, out.Value = Uint, uint64(v)
	case uint64:
		out.Kind, out.Value = Uint, v
	case float64:
		out.Kind, out.Value = Float, v
	case time.Duration:
		out.Kind = Duration
	case []string:
		out.Kind, out.Value = List, v
	}
	return out
}

// PFlags is fs as a FlagSet. A flag's Kind follows its Type (bool, the
// int, uint and float types, count, duration), List for a
// pflag.SliceValue (a list's elements are each given to Set: a
// stringSlice splits them again at commas, a stringArray does not), Map
// for a KeyValues; String for the others.
func PFlags(fs *pflag.FlagSet) FlagSet { return pFlags{fs} }

type pFlags struct{ fs *pflag.FlagSet }

func (p pFlags) Name() string                 { return p.fs.Name() }
func (p pFlags) Set(name, value string) error { return p.fs.Set(name, value) }
func (p pFlags) Changed(name string) bool     { return p.fs.Changed(name) }

func (p pFlags) VisitAll(fn func(Flag)) {
	p.fs.VisitAll(func(f *pflag.Flag) { fn(pFlag(f)) })
}

func (p pFlags) Lookup(name string) (Flag, bool) {
	f := p.fs.Lookup(name)
	if f == nil {
		return Flag{}, false
	}
	return pFlag(f), true
}

func pFlag(f *pflag.Flag) Flag {
	s := f.Value.String()
	out := Flag{Name: f.Name, Usage: f.Usage, DefValue: f.DefValue, Kind: String, Value: s}
	if kv, ok := f.Value.(*KeyValues); ok {
		out.Kind, out.Value = Map, []string(*kv)
		return out
	}
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		out.Kind, out.Value = List, sv.GetSlice()
		return out
	}
	var err error
	switch f.Value.Type() {
	case "bool":
		out.Kind = Bool
		out.Value, err = strconv.ParseBool(s)
	case "int", "int8", "int16", "int32", "int64", "count":
		out.Kind = Int
		out.Value, err = strconv.ParseInt(s, 0, 64)
	case "uint", "uint8", "uint16", "uint32", "uint64":
		out.Kind = Uint
		out.Value, err = strconv.ParseUint(s, 0, 64)
	case "float32", "float64":
		out.Kind = Float
		out.Value, err = strconv.ParseFloat(s, 64)
	case "duration":
		out.Kind = Duration
	}
	if err != nil { // a value that does not print as its type says
		out.Kind, out.Value = String, s
	}
	return out
}
