"""The GPT of examples/gpt written in PyTorch, for bench/gpt/run.sh: same model (names, shapes,
order of parameters), same data windows, same optimizer (AdamW with weight decay on the matrices
only, cosine schedule with warmup, global-norm clipping), gradient accumulation with DDP's
no_sync, one thread per process. Start it with torchrun:

  /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 bench/gpt/train_torch.py [...]

--init FILE loads the initial parameters the C program wrote with --save-init (raw float32 in
parameter order) and, from FILE.order, the order in which it visits the training windows, so both
programs train the same model on the same batches."""
import argparse
import gzip
import math
import os
import resource
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        # a plain attribute, not a buffer: gloo cannot broadcast bool tensors
        self.mask = torch.tril(torch.ones(context, context, dtype=torch.bool))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads, context)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, layers, heads, width, context, vocab=256):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, width)
        self.pos_emb = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.tok_emb.weight.t()  # tied output projection
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--data", default="/usr/share/doc/jargon-text/jargon.txt.gz")
    p.add_argument("--init", default=None)
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast on the CPU (the products in bf16, master weights float32)")
    a = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed)

    with gzip.open(a.data, "rb") if a.data.endswith(".gz") else open(a.data, "rb") as f:
        text = f.read()
    train_len = len(text) - len(text) * 10 // 100
    T = a.context
    data = torch.frombuffer(bytearray(text[:train_len]), dtype=torch.uint8).long()
    nwin = (train_len - 1) // T

    model = GPT(a.layers, a.heads, a.width, T)
    if a.init:
        flat = np.fromfile(a.init, dtype=np.float32)
        off = 0
        with torch.no_grad():
            for _, prm in model.named_parameters():
                n = prm.numel()
                prm.copy_(torch.from_numpy(flat[off:off + n]).view_as(prm))
                off += n
        assert off == flat.size, f"{a.init}: {flat.size} floats, the model has {off}"
        order = torch.from_numpy(np.fromfile(a.init + ".order", dtype=np.int64))
        assert order.numel() == nwin
    else:  # GPT-2's initialization, as gpt_init in examples/gpt/model.c
        with torch.no_grad():
            for n, prm in model.named_parameters():
                if prm.dim() == 2:
                    std = 0.02 / math.sqrt(2 * a.layers) if n.endswith("proj.weight") else 0.02
                    prm.normal_(0.0, std)
                else:
                    prm.fill_(1.0 if n.endswith("weight") else 0.0)  # norms 1 and 0, biases 0
        order = torch.randperm(nwin, generator=torch.Generator().manual_seed(a.seed))
    ddp = nn.parallel.DistributedDataParallel(model)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "emb" not in n]
    plain = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "emb" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": plain, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)

    def factor(step):  # transformers' cosine schedule with warmup
        if step < a.warmup:
            return step / max(1, a.warmup)
        progress = (step - a.warmup) / max(1, a.max_steps - a.warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    offsets = torch.arange(T + 1)
    # --bf16: what the C program's --mixed-precision bf16 does, the PyTorch way (autocast runs the
    # matrix products in bf16 and keeps norms, softmax and the loss in float32)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16)
    micro = 0
    tokens = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for step in range(1, a.max_steps + 1):
        losses = []
        for k in range(a.grad_accum):
            first = ((micro * world + rank) * a.batch) % (nwin - a.batch + 1)
            idx = order[first:first + a.batch]
            w = data[idx[:, None] * T + offsets]
            micro += 1
            if k + 1 < a.grad_accum:
                with ddp.no_sync():
                    with autocast:
                        loss = ddp(w[:, :-1], w[:, 1:])
                    (loss / a.grad_accum).backward()
            else:
                with autocast:
                    loss = ddp(w[:, :-1], w[:, 1:])
                (loss / a.grad_accum).backward()
            losses.append(loss.item())
            tokens += a.batch * T
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip) if a.clip > 0 else 0.0
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if a.log_every and (step % a.log_every == 0 or step == 1):
            m = torch.tensor([sum(losses) / len(losses)])
            dist.all_reduce(m)
            if rank == 0:
                print(f"step {step}: loss {m.item() / world:.4f}, grad norm {float(norm):.3f}", flush=True)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    figures = torch.tensor([tokens / elapsed, tokens / cpu], dtype=torch.float64)
    dist.all_reduce(figures)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"throughput: {figures[0].item():.0f} tokens/s in total ({world} processes), "
              f"{rss.item():.1f} MiB peak resident per process", flush=True)
        print(f"cpu: {figures[1].item() / world:.0f} tokens per CPU-second per process", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
