// Package tta holds test-time adaptation methods for CLIP: SubTTA and the
// baselines it is measured against, behind one contract, [Method], and one
// registry of presets.
//
// # The contract
//
// A [Method] runs on a [Model] (the vision tower on spago's tape, its
// LayerNorm parameters, its logit scale; *clip.Model implements it, and
// package tta does not import clip). It sees the test stream one batch at
// a time (Step), may update the visual LayerNorms, and returns logits and
// predictions with per-batch [Diagnostics]. Reset starts a new domain. Its
// whole state between two Steps saves to bytes and restores bit for bit
// (MarshalBinary, UnmarshalBinary); the part that survives Reset (SubTTA's
// EMA covariance) saves on its own (MarshalCarried, UnmarshalCarried).
// Bytes that do not fit wrap [ErrStateMismatch].
//
// # The registry
//
// Every method is one file: its type, its config, its [Registration]
// (name, preset per dataset, templates and class-name rule, constructor)
// and the encoding of its own memory. The package registers its own
// methods at start-up, and [Register] adds more at run time. [Lookup] returns a method's [Preset]
// for a dataset (errors wrap [ErrUnknownMethod] or [ErrUnknownDataset]),
// [Preset.Heads] builds its zero-shot heads from class names and
// [Preset.New] the Method. [Methods] lists the names.
//
// Each registration declares its settings as [Option]s: [Preset.Set]
// changes one by key ("rank", "alpha", "lr", …), refusing an unknown key
// ([ErrUnknownOption]) or a value out of its range ([ErrOptionValue]);
// [Preset.Options] lists them and [Preset.OptionValues] gives their
// values. [TemplateSet] names the prompt sets (CLIP's CIFAR and ImageNet
// ensembles, the paper's T0–T7) that [Preset.SetTemplates] puts in place.
// ImageNet-R, -A and -Sketch take ImageNet-C's presets ([VariantDatasets]).
//
// The methods: [Source] (zero-shot), [TENT], [BATCLIP], [MINT] (the SubTTA
// repo's "mint" and the official code's "mint-official"), [SubTTA]
// (subtta-s, -t, -b, -m by its second-step loss), [WATT] (watt-s,
// watt-lite), [TDA], [ECALP], [VTE], [Zero], [DMN], [TPT], [MEMO], [RoTTA]
// and [STS]. A method that trains records the vision tower's forward pass
// on a fresh tape; its loss on the features (package feature, float64)
// gives ∂L/∂F, which is injected on the feature node and propagated by
// ag.Backward to the visual LayerNorm parameters; an optimizer of package
// optim, chosen by an [optim.Config], updates them in place. TPT learns
// prompt context through the text tower instead, and STS a steering vector
// of the head; TDA, ECALP, VTE, ZERO and DMN train nothing.
//
// # Where things go
//
// A new method is a file here and an entry in the package's list of
// built-in methods (tta/registry.go), or a [Register] call from outside
// the package; a new loss or other math on features goes to package
// feature; a new protocol (how a method meets a stream: reset, continual,
// mixed) goes to package online, which also orders streams and runs them.
package tta
