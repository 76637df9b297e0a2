"""The host's cost of one collective call, in one process (a world of one).

    python benchmarks/collective_host_cost.py [--numel 16384] [--calls 2000] [--rounds 7]

tpu_dist's ``all_reduce``, ``all_gather_single`` and ``reduce_scatter_single``
of ``--numel`` floats, called back to back (each predicted after the first
few, as a training loop's are), next to Gloo's on CPU tensors in the same
process: the calling thread's CPU time per call (median of ``--rounds``
rounds of ``--calls`` calls), and torch_tpu's own Python calls per call (as
tests/test_distributed.py counts them).  With no peer and no transport what
is left is each engine's host work, the part a TPU keeps whatever its
interconnect; it holds steady on a loaded 2-core machine, where the
two-process figures of allreduce_bandwidth.py swing by more than a change of
tens of microseconds.
"""
import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist

import torch_tpu  # noqa: F401
from torch_tpu.profiler import python_calls


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _calls(device, numel, group):
    x = torch.ones(numel, device=device)
    out = torch.empty(numel, device=device)
    # (torch >= 2.13's names: the older ones warn on every call)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return {"all_reduce": lambda: dist.all_reduce(x, group=group),
            "all_gather": lambda: gather(out, x, group=group),
            "reduce_scatter": lambda: scatter(out, x, group=group)}


def _python_calls(call, n=20):
    """torch_tpu's Python and C calls per ``call()``."""
    def calls():
        for _ in range(n):
            call()
    return python_calls(calls) / n


def _cpu_us_per_call(call, calls, rounds, sync):
    per_round = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            call()
        sync()
        per_round.append((time.thread_time() - start) / calls * 1e6)
    return statistics.median(per_round)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--numel", type=int, default=16384)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    torch.set_num_threads(1)
    dist.init_process_group("tpu_dist", rank=0, world_size=1)
    gloo = dist.new_group(backend="gloo")
    engines = {"tpu_dist": (_calls("tpu", args.numel, None), torch.tpu.synchronize),
               "Gloo": (_calls("cpu", args.numel, gloo), lambda: None)}
    rows = {}
    for name, (calls, sync) in engines.items():
        for op, call in calls.items():
            for _ in range(20):  # checked, learned, predicted
                call()
            sync()
            rows.setdefault(op, {})[name] = _cpu_us_per_call(call, args.calls, args.rounds, sync)
            if name == "tpu_dist":
                rows[op]["calls"] = _python_calls(call)
                sync()
    print(f"{args.numel} float32 ({args.numel * 4 // 1024} KB) per call, {args.calls} calls back to back, "
          f"median of {args.rounds} rounds; the calling thread's CPU time per call")
    print()
    print("| op | tpu_dist µs | Gloo µs | tpu_dist - Gloo | torch_tpu Python calls per call |")
    print("|---|---|---|---|---|")
    for op, row in rows.items():
        print(f"| {op} | {row['tpu_dist']:.1f} | {row['Gloo']:.1f} | {row['tpu_dist'] - row['Gloo']:+.1f} "
              f"| {row['calls']:.1f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
