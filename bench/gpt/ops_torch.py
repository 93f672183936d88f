"""Where one training step of bench/gpt/train_torch.py's model (the GPT of examples/gpt in
PyTorch, float32, 4 x 256 tokens, one thread) spends its time, per operator (torch.profiler, self
CPU time), to set against bench/gpt/ops_bench (the C example, per operation). Prints the median
over REPS steps of each operator in ms, and the same grouped into the C program's operations.

  /usr/bin/python3 bench/gpt/ops_torch.py [reps]   (OPENBLAS_CORETYPE, ATEN_CPU_CAPABILITY as
                                                     for the run; one thread)"""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F  # noqa: F401 (train_torch's model uses it)
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch import GPT  # noqa: E402

# aten operator -> the C program's operation (gpt_op_name); the rest is "other"
GROUPS = {
    "aten::addmm": "linear layers (addmm/mm)", "aten::mm": "linear layers (addmm/mm)",
    "aten::bmm": "attention", "aten::_softmax": "attention", "aten::_softmax_backward_data": "attention",
    "aten::masked_fill_": "attention", "aten::masked_fill": "attention",
    "aten::native_layer_norm": "layernorm", "aten::native_layer_norm_backward": "layernorm",
    "aten::gelu": "gelu", "aten::gelu_backward": "gelu",
    "aten::_log_softmax": "softmax+loss", "aten::_log_softmax_backward_data": "softmax+loss",
    "aten::nll_loss_forward": "softmax+loss", "aten::nll_loss_backward": "softmax+loss",
    "aten::embedding_dense_backward": "embedding", "aten::index_select": "embedding",
    "aten::embedding": "embedding",
    "aten::add": "residual and other elementwise", "aten::add_": "residual and other elementwise",
    "aten::mul": "residual and other elementwise", "aten::div": "residual and other elementwise",
    "aten::sum": "bias gradients (sum)",
    "aten::copy_": "copies (transpose, contiguous)", "aten::clone": "copies (transpose, contiguous)",
}


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = GPT(4, 4, 256, 256)
    g = torch.Generator().manual_seed(7)
    w = torch.randint(0, 256, (4, 257), generator=g)
    per_op = {}
    totals = []
    for r in range(-1, reps):  # r = -1: warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss = model(w[:, :-1], w[:, 1:])
            loss.backward()
        model.zero_grad(set_to_none=True)
        if r < 0:
            continue
        step = 0.0
        for e in prof.key_averages():
            ms = e.self_cpu_time_total / 1e3
            per_op.setdefault(e.key, []).append(ms)
            step += ms
        totals.append(step)
    plain = []  # the same steps without the profiler, in thread CPU time (ops_bench's clock)
    for r in range(reps):
        t0 = time.thread_time()
        loss = model(w[:, :-1], w[:, 1:])
        loss.backward()
        model.zero_grad(set_to_none=True)
        plain.append((time.thread_time() - t0) * 1e3)
    med = {k: statistics.median(v + [0.0] * (reps - len(v))) for k, v in per_op.items()}
    print(f"# PyTorch {torch.__version__}: one float32 step (4 x 256 tokens), self CPU time per operator, "
          f"median of {reps} steps (ms); ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '(default)')}")
    for k, v in sorted(med.items(), key=lambda kv: -kv[1])[:22]:
        print(f"{k:40s} {v:9.2f}")
    groups = {}
    for k, v in med.items():
        grp = GROUPS.get(k, "other")
        groups[grp] = groups.get(grp, 0.0) + v
    print("# grouped as the C program's operations")
    for grp, v in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"{grp:40s} {v:9.2f}")
    print(f"{'step (sum of self times)':40s} {statistics.median(totals):9.2f}")
    print(f"{'step without the profiler (thread CPU)':40s} {statistics.median(plain):9.2f}")


if __name__ == "__main__":
    main()
