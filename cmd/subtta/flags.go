package main

import (
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data/corrupt"
)

// The shared flags of the commands built by their own constructor, and the
// completion of flag values.

// completeChoices completes a flag whose value is one of choices.
func completeChoices(choices ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(choices, cobra.ShellCompDirectiveNoFileComp)
}

// completeList completes a flag whose value is a comma-separated list of
// the names choices returns (and, if extra is given, those whole values,
// as "all"): the word after the last comma, the ones before it kept and
// not offered again.
func completeList(choices func() []string, extra ...string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		done, _ := splitLast(toComplete)
		if done == "" {
			out = append(out, extra...)
		}
		given := strings.Split(done, ",")
		for _, c := range choices() {
			if done != "" && slices.Contains(given, c) {
				continue
			}
			out = append(out, done+c)
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}

// splitLast splits a comma-separated list being typed into what comes up
// to its last comma (included) and the word after it.
func splitLast(s string) (done, word string) {
	i := strings.LastIndexByte(s, ',')
	return s[:i+1], s[i+1:]
}

// completeCorruptions completes --corruptions: the benchmark's corruptions, or all.
var completeCorruptions = completeList(corrupt.Names, "all")

// modelOptions are the values of --model, --model-config, --arch and
// --vocab (addModelFlags).
type modelOptions struct {
	model, modelConfig, arch, vocab string
}

// addModelFlags adds --model (with modelHelp, or modelFlagHelp if it is
// empty), --model-config and --arch to f, and --vocab if withVocab.
func addModelFlags(f *pflag.FlagSet, o *modelOptions, modelHelp string, withVocab bool) {
	if modelHelp == "" {
		modelHelp = modelFlagHelp
	}
	f.StringVar(&o.model, "model", "", modelHelp)
	f.StringVar(&o.modelConfig, "model-config", "", modelConfigHelp)
	f.StringVar(&o.arch, "arch", "", archHelp)
	if withVocab {
		f.StringVar(&o.vocab, "vocab", "", "CLIP vocabulary (see subtta tokenize -h)")
	}
}

// open builds the model the flags name (openModel), its linear layers in
// prec.
func (o *modelOptions) open(prec kernel.Precision, stderr io.Writer) (*clip.Bundle, error) {
	return openModel(o.model, o.modelConfig, o.arch, o.vocab, prec, stderr)
}
