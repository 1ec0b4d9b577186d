// Package weights reads and writes model checkpoints: safetensors (mapped,
// F32/F16/BF16, bounds-checked header), PyTorch .pt archives, and the name
// maps between OpenAI/open_clip and Hugging Face CLIP state dicts.
package weights
