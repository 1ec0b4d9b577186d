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
  SubTTA step       one SubTTA-MINT step, timed whole (ImageNet-C preset: AdamW lr 5e-4, wd 0.01,
                    R 256, α 0.5; a random head of --classes unit rows, text subspace from its SVD),
                    in two forms:
                      subtta_step_eigh: the algorithm `subtta bench` times: the alignment in float64
                        with torch.linalg.eigh and its closed-form gradient injected at F1, the
                        projection in float64, the MINT loss, AdamW twice, the third pass's argmax
                        read on the host
                      subtta_step_svd: the official code's alignment (torch.linalg.svd of Σ in
                        float32 and autograd through it), the rest the same
                    each after --warmup steps, median of --reps               -> images/s
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
    ap.add_argument("--classes", type=int, default=1000)
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
    source = [p.detach().clone() for p in norms]
    for name in ["subtta_step_eigh", "subtta_step_svd"]:
        with torch.no_grad():  # each form from the same weights, with no gradient left over
            for p, v in zip(norms, source):
                p.copy_(v)
                p.grad = None
        try:
            step = subtta_step(torch, model, norms, x, a.classes, official=name.endswith("svd"))
            med, times = median_seconds(step)
        except Exception as e:  # the figures above stand; say why this one is missing
            print(f"{name}: failed: {type(e).__name__}: {e}", flush=True)
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        out[name] = {"median_s": med, "times_s": times, "images_per_s": a.batch / med}
        print(f"{name:17s} batch {a.batch}: {med * 1e3:8.2f} ms  {a.batch / med:9.1f} images/s", flush=True)
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


def subtta_step(torch, model, norms, x, classes, official):
    """Returns a function running one SubTTA-MINT step on the batch x (see the module's doc), on
    the LayerNorm parameters norms (with no gradient held). The text subspace, Σ_T and the
    optimiser are made here, untimed."""
    dev, d, B = x.device, model.visual.proj.shape[1], x.shape[0]
    R, alpha, first = 256, 0.5, 1  # the preset's R and α; the first principal direction is left out
    g = torch.Generator().manual_seed(3)
    head = torch.randn(classes, d, generator=g, dtype=torch.float64)
    head = (head / head.norm(dim=1, keepdim=True)).to(dev)
    r = min(classes - 1, R)
    tc = head - head.mean(0)
    basis_t = torch.linalg.svd(tc, full_matrices=False)[2][first:first + r]  # r×d
    proj = basis_t.t() @ basis_t  # P_T, d×d
    state = {"sigma": tc.t() @ tc / (classes - 1 + 1e-6)}
    head32, basis_t32 = head.float(), basis_t.float()
    m = max(1 - alpha, 1e-6)
    opt = torch.optim.AdamW(norms, lr=5e-4, weight_decay=0.01)

    def align_closed_form(f1):
        # Σ = α·Σ_old + (1−α)·S in float64, its eigenvectors, and ∂L_align/∂F1 in closed form.
        fc = f1.detach().double()
        fc = fc - fc.mean(0)
        c = 1 / (B - 1 + 1e-6)
        sigma = alpha * state["sigma"] + (1 - alpha) * (c * fc.t() @ fc + 1e-6 * torch.eye(d, dtype=torch.float64, device=dev))
        state["sigma"] = sigma
        lam, vec = torch.linalg.eigh(sigma)
        lam, vec = lam.flip(0), vec.flip(1)  # descending: column j is v_j
        u = slice(first, first + r)
        mm = vec.t() @ (proj @ vec[:, u])  # d×r: v_jᵀ P_T v_k, k in U
        gap = lam[u].unsqueeze(0) - lam.unsqueeze(1)  # λ_k − λ_j
        k = torch.where(gap.abs() > 1e-12 * lam[0].abs(), mm / gap, torch.zeros_like(mm))
        k[u] = 0  # pairs within U cancel
        k *= -(1 - alpha) / (r * m)
        amat = vec @ k @ vec[:, u].t()
        return (2 * c * fc @ (amat + amat.t())).float()

    def align_svd(f1):
        # The official code: Σ in float32 with F1's graph, its SVD, autograd through it.
        fc = f1 - f1.mean(0)
        s = fc.t() @ fc / (B - 1 + 1e-6) + 1e-6 * torch.eye(d, device=dev)
        sigma = alpha * state["sigma"].float() + (1 - alpha) * s
        state["sigma"] = sigma.detach().double()
        basis_v = torch.linalg.svd(sigma)[2][first:first + r]
        return -(basis_v @ basis_t32.t()).pow(2).sum() / (r * m)

    def step():
        f1 = model.encode_image(x)
        if official:
            align_svd(f1).backward()
        else:
            f1.backward(align_closed_form(f1))
        opt.step()
        opt.zero_grad(set_to_none=True)
        f2 = model.encode_image(x)
        y = f2.double() @ proj
        z = y / y.norm(dim=1, keepdim=True)
        labels = (z @ head.t()).argmax(1)
        # MINT: −(1/B)·Σ_c n_c‖μ_c − z̄‖², per-batch means with gradient.
        counts = torch.bincount(labels, minlength=classes).to(z.dtype)
        sums = torch.zeros(classes, d, dtype=z.dtype, device=dev).index_add(0, labels, z)
        present = counts > 0
        means = sums[present] / counts[present].unsqueeze(1)
        loss = -(counts[present].unsqueeze(1) * (means - z.mean(0)).pow(2)).sum() / B
        if int(present.sum()) >= 2:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            f3 = model.encode_image(x)
            (100 * (f3 / f3.norm(dim=1, keepdim=True)) @ head32.t()).argmax(1).cpu()

    return step


if __name__ == "__main__":
    main()
