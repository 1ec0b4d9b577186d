// Package weights reads and writes model checkpoints and maps CLIP tensor
// names between conventions.
//
// Files:
//   - safetensors: Open maps a file (mmap) and checks its header strictly:
//     known dtypes (F64, F32, F16, BF16, I64, I32, U8, I8), shapes that match
//     their byte ranges, ranges that tile the data section with no overlap,
//     gap or truncation, no duplicate names. Zstd-compressed files
//     (.safetensors.zst) are decompressed into memory. Write, WriteZstd and
//     WriteFile write them, converting float data to F16/BF16 with
//     round-to-nearest-even (Float32ToHalf, Float32ToBFloat16); WriteFile
//     writes a temporary file and renames it, and WriteFileContext stops it
//     when its context is done, leaving no file.
//   - PyTorch zip archives: torch.save state dicts and the TorchScript
//     archives OpenAI distributes. Both pickle tensors as
//     torch._utils._rebuild_tensor_v2 over storages in data/; a TorchScript
//     data.pkl pickles the module tree, and a tensor's name is its attribute
//     path (visual.conv1.weight). The unpickler (gopickle's, with class
//     handlers of this package) executes nothing, and corrupt input gives an
//     error, not a panic. Legacy pre-1.6 (non-zip) files are not read.
//   - Directories in the Hugging Face layout: model.safetensors (or its
//     .zst, shards with an index, pytorch_model.bin) with config.json.
//
// Load reads any of these into a State: tensors by name as float32, with
// shape and original dtype. ToOpenAI renames a state to OpenAI's CLIP names,
// the canonical names of this project (visual.transformer.resblocks.N.attn.in_proj_weight,
// token_embedding.weight, visual.proj, ...): Hugging Face CLIPModel states
// have their q/k/v projections concatenated and projection matrices
// transposed; open_clip ViT states already use OpenAI's names. ToHF is the
// inverse.
//
// CLIPConfig describes a ViT CLIP model. ParseConfig reads Hugging Face,
// open_clip and OpenAI configurations; InferConfig reads one off the tensor
// shapes; Validate checks a state against one. LoadCLIP does all of it:
// load, rename, configure, validate. Convert writes any checkpoint as an
// OpenAI-named safetensors file carrying its configuration, its floats in
// F32, F16 or BF16, or with I8 the weights --precision int8 quantises
// (CLIPConfig.Int8Names) stored as it quantises them
// (kernel.QuantizeInt8Rows): an I8 tensor beside its per-row float32
// scales (Int8ScaleSuffix), about a quarter of their F32 size. Load
// dequantises such weights to float32, q·scale, so that every reader takes
// them; run in int8, they quantise to the stored values again.
//
// Hub.Pull downloads model files from the Hugging Face Hub into a cache,
// verifying SHA-256 checksums and resuming interrupted downloads: a dropped
// connection or a 429/5xx answer is retried with exponential backoff and
// jitter (Retry), each try resuming the partial file. HubFromEnv reads
// HF_ENDPOINT, HF_TOKEN and the Hugging Face cache, whose files are used in
// place.
package weights
