"""The loop of busbw.c through PyTorch's gloo process group (torch.distributed, CPU tensors),
for bench/multinode/ops.sh: the same ops, sizes, iterations and warm-up; each call's time is the
slowest rank's (a MAX all_reduce of the times after the loop); rank 0 prints the median as
"op size count time_us algbw busbw". Started once per process with MASTER_ADDR, MASTER_PORT,
RANK and WORLD_SIZE set (as torchrun would). Usage: python3 torch_busbw.py [max_bytes]
(BUSBW_OPS, BUSBW_MIN as busbw.c)."""
import os
import sys
import time

import torch
import torch.distributed as dist


def iters(nbytes):
    if nbytes <= 65536:
        return 200
    if nbytes <= (1 << 20):
        return 40
    if nbytes <= (16 << 20):
        return 10
    return 5


def main():
    maxb = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
    ops = os.environ.get("BUSBW_OPS") or "all_reduce"
    minb = max(4, int(os.environ.get("BUSBW_MIN", "4096")))
    dist.init_process_group("gloo")
    n, rank = dist.get_world_size(), dist.get_rank()
    if rank == 0:
        print(f"# busbw torch {torch.__version__} gloo, {n} processes", flush=True)
    for name in ("all_reduce", "broadcast", "all_gather"):
        if name not in ops:
            continue
        nbytes = minb
        while nbytes <= maxb:
            count = nbytes // 4
            buf = torch.full((count,), float(rank + 1))
            out = [torch.empty(count) for _ in range(n)]
            if name == "all_reduce":
                fn = lambda: dist.all_reduce(buf)
            elif name == "broadcast":
                fn = lambda: dist.broadcast(buf, 0)
            else:
                fn = lambda: dist.all_gather(out, buf)
            fn()
            for _ in range(3):
                fn()
            it = iters(nbytes)
            t = torch.empty(it, dtype=torch.float64)
            for i in range(it):
                t0 = time.perf_counter()
                fn()
                t[i] = time.perf_counter() - t0
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            med = float(t.sort().values[it // 2])
            alg = nbytes / med / 1e9
            f = 2.0 * (n - 1) / n if name == "all_reduce" else 1.0 if name == "broadcast" else (n - 1) / n
            if rank == 0:
                print(f"{name} {nbytes} {count} {med * 1e6:.1f} {alg:.3f} {alg * f:.3f}", flush=True)
            nbytes *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
