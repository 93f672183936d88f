#!/usr/bin/env python3
"""The GPU benchmark's PyTorch side: the same MLP step as bench_gpu_lib.c and baseline.cu, with
PyTorch 2.x and Accelerate 1.x (Accelerator.prepare + accelerator.backward), the same synthetic
data preloaded on the GPU (the generator of bench/gpu/common.h), TF32 off, torch.optim.AdamW with
the same hyperparameters (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01). One process.
Prints one RESULT line like the C programs.
Usage: train_torch.py --batch B [--steps S --warmup W --hidden H --lr X]"""
import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator

SAMPLES, IN, CLASSES = 60000, 784, 10


def make_data():
    """bench/gpu/common.h's bg_make_data: a 64-bit LCG, the high 31 bits of each state."""
    n = SAMPLES * IN + SAMPLES
    mult, inc, mask = 6364136223846793005, 1442695040888963407, (1 << 64) - 1
    # Jump-ahead in numpy: state_k = a^k s + c (a^k - 1)/(a - 1), computed by doubling in uint64.
    out = np.empty(n, dtype=np.uint64)
    s = 12345
    chunk = 1 << 16
    a_pow = np.empty(chunk, dtype=np.uint64)  # a^(i+1) mod 2^64
    c_acc = np.empty(chunk, dtype=np.uint64)  # c (1 + a + ... + a^i) mod 2^64
    with np.errstate(over="ignore"):
        a = np.uint64(mult)
        c = np.uint64(inc)
        pa, pc = np.uint64(1), np.uint64(0)
        for i in range(chunk):
            pc = pc * a + c
            pa = pa * a
            a_pow[i], c_acc[i] = pa, pc
        for start in range(0, n, chunk):
            k = min(chunk, n - start)
            states = a_pow[:k] * np.uint64(s) + c_acc[:k]
            out[start:start + k] = states >> np.uint64(33)
            s = int(states[k - 1]) & mask
    # as the C code: the integer rounded to float32, then float32 arithmetic
    x = out[: SAMPLES * IN].astype(np.float32) / np.float32(2147483648.0) - np.float32(1.0)
    y = (out[SAMPLES * IN:] % CLASSES).astype(np.int64)
    return torch.from_numpy(x.reshape(SAMPLES, IN)), torch.from_numpy(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    a = p.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    accelerator = Accelerator()
    dev = accelerator.device
    assert dev.type == "cuda", f"no GPU: {dev}"
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info()
    x, y = make_data()
    x, y = x.to(dev), y.to(dev)
    torch.manual_seed(42)
    model = torch.nn.Sequential(torch.nn.Linear(IN, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, CLASSES))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    model, opt = accelerator.prepare(model, opt)
    torch.cuda.reset_peak_memory_stats()
    times, loss_sum, peak_used = [], 0.0, total - free0
    last = SAMPLES - a.batch + 1
    for k in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        off = (k * a.batch) % last
        logits = model(x[off:off + a.batch])
        loss = F.cross_entropy(logits, y[off:off + a.batch])
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad(set_to_none=False)
        torch.cuda.synchronize()
        if k >= a.warmup:
            times.append(time.perf_counter() - t0)
        free, _ = torch.cuda.mem_get_info()
        peak_used = max(peak_used, total - free)
        loss_sum += loss.item()
    med = statistics.median(times)
    peak_mib = (peak_used - (total - free0)) / 2**20
    print(f"RESULT impl=torch+accelerate batch={a.batch} median_ms={med * 1e3:.4f} "
          f"samples_per_s={a.batch / med:.0f} peak_mib={peak_mib:.1f} "
          f"loss={loss_sum / (a.warmup + a.steps):.4f} "
          f"allocator_peak_mib={torch.cuda.max_memory_allocated() / 2**20:.1f} "
          f"torch={torch.__version__}")


if __name__ == "__main__":
    main()
