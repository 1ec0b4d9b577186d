#!/usr/bin/env python3
"""PyTorch eager on a GPU doing what `subtta bench --device cuda` times.

usage: torch_vitb32_cuda.py --clip-src DIR [--device cuda] [--batch 64] [--warmup 2] [--reps 5] [--tf32]
                            [--matrix-batches 64,256] [--matrix-precisions fp32,tf32,bf16,fp16] [--json OUT]

  --clip-src  a folder holding OpenAI's `clip` package and an ftfy stub, made by
              ../shared/bench/extract_openai_clip.sh (the model code of the CPU anchor,
              ../shared/bench/torch_vitb32.py)

The work is the CPU anchor's, on the device: CLIP ViT-B/32 with random weights in float32,
  forward           encode_image under torch.no_grad()                       -> images/s
  forward+backward  the TENT loss (entropy of softmax(100·normalize(f)·Tᵀ), T the normalised text
                    features of "a photo of a {c}." for CIFAR-10's classes) backward to the visual
                    LayerNorm parameters only                                  -> images/s
  SubTTA estimate   1 / (2/forward+backward + 1/forward): a SubTTA step's two recorded passes and
                    its prediction, without its eigendecomposition (the CPU anchor's definition)
  eigh              torch.linalg.eigh of a 512×512 float64 covariance on the device, the
                    decomposition a SubTTA step adds (subtta's --device cuda runs it with cuSOLVER),
                    and the estimate with it                                   -> seconds, images/s
  forward+upload    forward with the images copied from the host's (pageable) memory first, as
                    `subtta bench --device cuda` times its forward pass          -> images/s
  forward matrix    with --matrix-batches: the forward pass at each of those batch sizes in each
                    of --matrix-precisions: fp32 (TF32 off), tf32 (TF32 allowed), bf16 and fp16
                    (torch.autocast), what `subtta bench --device cuda --precision P` compares with;
                    each also with the images copied from the host first (key suffix _upload)
                                                                               -> images/s
Times are medians over --reps after --warmup runs, each ended by torch.cuda.synchronize(). TF32
is off unless --tf32 (subtta's default: cuBLAS without TF32), except in the matrix's tf32 rows.
"""
import contextlib
import argparse
import json
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clip-src", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--matrix-batches", default="")
    ap.add_argument("--matrix-precisions", default="fp32,tf32,bf16,fp16")
    ap.add_argument("--json")
    a = ap.parse_args()

    sys.path.insert(0, os.path.abspath(a.clip_src))
    import torch
    import clip
    import clip.model

    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(0)
    model = clip.model.CLIP(embed_dim=512, image_resolution=224, vision_layers=12, vision_width=768,
                            vision_patch_size=32, context_length=77, vocab_size=49408, transformer_width=512,
                            transformer_heads=8, transformer_layers=12).float().eval().to(dev)
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    with torch.no_grad():
        text = model.encode_text(clip.tokenize([f"a photo of a {c}." for c in classes]).to(dev))
        text = text / text.norm(dim=-1, keepdim=True)
    model.requires_grad_(False)
    norms = []
    for m in model.visual.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.weight.requires_grad_(True)
            m.bias.requires_grad_(True)
            norms += [m.weight, m.bias]

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    x = torch.randn(a.batch, 3, 224, 224, generator=torch.Generator().manual_seed(0)).to(dev)

    def forward():
        with torch.no_grad():
            model.encode_image(x)

    x_host = x.cpu()

    def forward_upload():
        with torch.no_grad():
            model.encode_image(x_host.to(dev))

    def forward_backward():
        for p in norms:
            p.grad = None
        f = model.encode_image(x)
        logits = 100.0 * (f / f.norm(dim=-1, keepdim=True)) @ text.t()
        loss = (-(logits.softmax(1) * logits.log_softmax(1)).sum(1)).mean()
        loss.backward()

    feats = torch.randn(4 * a.batch, 512, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(dev)
    cov = torch.cov(feats.t())

    def eigh():
        torch.linalg.eigh(cov)

    def median_seconds(fn):
        for _ in range(a.warmup):
            fn()
        sync()
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times), times

    out = {"torch": torch.__version__, "device": str(dev), "batch": a.batch, "tf32": a.tf32,
           "warmup": a.warmup, "reps": a.reps}
    if dev.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(dev)
        out["cuda"] = torch.version.cuda
    for name, fn in [("forward", forward), ("forward_backward", forward_backward)]:
        med, times = median_seconds(fn)
        out[name] = {"median_s": med, "times_s": times, "images_per_s": a.batch / med}
        print(f"{name:17s} batch {a.batch}: {med * 1e3:8.2f} ms  {a.batch / med:9.1f} images/s", flush=True)
    med, times = median_seconds(forward_upload)
    out["forward_upload"] = {"median_s": med, "times_s": times, "images_per_s": a.batch / med}
    print(f"{'forward+upload':17s} batch {a.batch}: {med * 1e3:8.2f} ms  {a.batch / med:9.1f} images/s", flush=True)
    fw, fb = out["forward"]["images_per_s"], out["forward_backward"]["images_per_s"]
    out["subtta_step_estimate_images_per_s"] = 1 / (2 / fb + 1 / fw)
    print(f"SubTTA step estimate (2 forward+backward + 1 forward): {out['subtta_step_estimate_images_per_s']:.1f} images/s")
    med, times = median_seconds(eigh)
    out["eigh_512_float64"] = {"median_s": med, "times_s": times}
    out["subtta_step_estimate_with_eigh_images_per_s"] = a.batch / (a.batch / out["subtta_step_estimate_images_per_s"] + med)
    print(f"eigh 512×512 float64: {med * 1e3:.2f} ms; SubTTA step estimate with it: {out['subtta_step_estimate_with_eigh_images_per_s']:.1f} images/s")
    if a.matrix_batches:
        out["forward_matrix"] = {}
        for batch in [int(b) for b in a.matrix_batches.split(",")]:
            xb_host = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(0))
            xb = xb_host.to(dev)
            for prec in a.matrix_precisions.split(","):
                torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
                torch.backends.cudnn.allow_tf32 = prec == "tf32"
                cast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)

                def fwd(images):
                    ctx = torch.autocast(dev.type, dtype=cast) if cast else contextlib.nullcontext()
                    with torch.no_grad(), ctx:
                        model.encode_image(images.to(dev))

                for key, images in [("", xb), ("_upload", xb_host)]:
                    med, times = median_seconds(lambda: fwd(images))
                    out["forward_matrix"][f"{prec}_batch{batch}{key}"] = {"median_s": med, "times_s": times, "images_per_s": batch / med}
                    what = "forward" + ("+upload" if key else "")
                    print(f"{what:14s} {prec:4s} batch {batch}: {med * 1e3:8.2f} ms  {batch / med:9.1f} images/s", flush=True)
            del xb, xb_host
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    if dev.type == "cuda":
        out["max_memory_allocated_MiB"] = torch.cuda.max_memory_allocated(dev) / 2**20
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
