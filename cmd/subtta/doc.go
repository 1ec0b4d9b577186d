// Command subtta runs CLIP and test-time adaptation from the command line.
//
// Usage:
//
//	subtta <command> [flags] [arguments]
//
// Commands:
//
//	tokenize   CLIP BPE token ids of texts (JSON)
//	embed      image and text features of a model (JSON)
//	classify   zero-shot classification of images against labels
//	convert    rewrite a checkpoint as OpenAI-named safetensors (fp16/bf16/int8, zstd)
//	pull       download a Hugging Face checkpoint into the cache
//	eval       test-time adaptation over a corrupted benchmark: the paper's table, CSV, JSON, plots
//	report     the seeds of one eval run compared: mean ± std per cell, difference to source
//	bench      images/s of the ViT-B/32 vision tower, forward and forward+backward
//	corrupt    write CIFAR-10/100-C or ImageNet-C from a clean dataset
//	train      train a small CLIP from scratch on CIFAR-10 (checkpoints, resume, log)
//	serve      HTTP classifier that adapts to each client's image stream (subtta-m)
//	loadtest   requests/s and latency of a subtta serve on this machine
//	version    the build, the CPU and whether CUDA is available
//	completion a shell completion script
//
// Run `subtta help <command>` for a command's flags, and
// `subtta completion bash|zsh|fish|powershell` for shell completion.
package main
