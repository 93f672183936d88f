"""phases.c through PyTorch's gloo process group, for bench/multinode/phases.sh (TORCH=1): the
same PHASES ("ag64k,bc64k,ar64m": all_gather, broadcast from rank 0, all_reduce of a size with an
optional k or m), the same 3 warm-up calls and 300 timed calls (5 from 16 MiB), each call's time
the slowest rank's; rank 0 prints "phase size med p10 p90" in us. Started once per process with
MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE set."""
import os
import time

import torch
import torch.distributed as dist


def phase_bytes(s):
    unit = {"k": 1024, "m": 1 << 20}.get(s[-1:], 1)
    return int(s[:-1] if unit > 1 else s) * unit


def main():
    dist.init_process_group("gloo")
    n, rank = dist.get_world_size(), dist.get_rank()
    for tok in (os.environ.get("PHASES") or "ag64k,ar64m,ag64k").split(","):
        op, nbytes = tok[:2], phase_bytes(tok[2:])
        buf = torch.full((nbytes // 4,), float(rank + 1))
        out = [torch.empty(nbytes // 4) for _ in range(n)]
        fn = {"ag": lambda: dist.all_gather(out, buf), "ar": lambda: dist.all_reduce(buf),
              "bc": lambda: dist.broadcast(buf, 0)}[op]
        it = 5 if nbytes >= (16 << 20) else 300
        for _ in range(3):
            fn()
        t = torch.empty(it, dtype=torch.float64)
        for i in range(it):
            t0 = time.perf_counter()
            fn()
            t[i] = (time.perf_counter() - t0) * 1e6
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        s = t.sort().values
        if rank == 0:
            print(f"{tok:<10s} {nbytes:10d} med {s[it // 2]:9.1f} p10 {s[it // 10]:9.1f} "
                  f"p90 {s[it * 9 // 10]:9.1f}", flush=True)
    dist.destroy_process_group()


main()
