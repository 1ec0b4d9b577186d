// Package flagfile reads a command's flags from a file and writes them back
// as one: a config file is the command line written down.
//
// The file is YAML (JSON being YAML too), one document (a second, after
// "---", is refused: it would not be read), with one key per flag, the
// flag's long name as on the command line ("batch-size"; "batch_size" is
// the same key), its value as the flag would take it:
//
//	methods: source,tent        # or a list: [source, tent], joined with commas
//	limit: 50
//	plot: true
//	set:                        # a KeyValues flag takes nested blocks:
//	  subtta-m: {rank: 8}       #   --set subtta-m.rank=8
//	templates: ["a photo of a {}.", "a {}."]   # a repeatable flag: one value each
//
// Apply sets the flags of a FlagSet that the command line did not set,
// so that flags given on the command line win over the file; a key that
// names no flag is refused with the nearest flag's name ("unknown key
// frost_di; did you mean frost?"), and a key whose value is its flag's
// default leaves the flag as if the key were absent (so that a file Write
// wrote, listing every flag, reads back as the same command). Write
// writes every flag's current value in that key set, each under its help
// as a comment.
//
// The package knows nothing of any command: it works on a FlagSet, the
// standard library's (GoFlags: each flag's kind read through flag.Getter)
// or pflag's, cobra's (PFlags: by the flag's Type), so that a command's
// file follows its flags however the command defines them.
package flagfile
