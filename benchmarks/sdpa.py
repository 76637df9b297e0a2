"""F.scaled_dot_product_attention: the tpu device (XLA composite path on this
platform) against PyTorch's CPU kernel, forward, float32, head dim 64.

    python benchmarks/sdpa.py [--causal] [--repeat 3]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.dirname(__file__))
from common import best_time, table  # noqa: E402

# (batch, heads, seq): seq 256 -> 2048, batch 1-2, 4-8 heads
CASES = [(2, 8, 256), (2, 8, 512), (1, 8, 1024), (1, 4, 2048)]
HEAD_DIM = 64


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for b, h, seq in CASES:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(b, h, seq, HEAD_DIM, generator=gen) for _ in range(3))
        qt, kt, vt = q.to("tpu"), k.to("tpu"), v.to("tpu")
        number = max(2, 2048 // seq)
        cpu = best_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal),
                        repeat=args.repeat, number=number, warmup=1)
        tpu = best_time(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal),
                        sync=torch.tpu.synchronize, repeat=args.repeat, number=number, warmup=2)
        err = (F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal).cpu()
               - F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)).abs().max().item()
        rows.append((f"{b}x{h}x{seq}x{HEAD_DIM}", f"{cpu * 1e3:.2f}", f"{tpu * 1e3:.2f}",
                     f"{cpu / tpu:.2f}x", f"{err:.1e}"))
    platform = torch.tpu.get_device_name()
    print(f"SDPA forward, float32, causal={args.causal}; tpu device = {platform}")
    print(table(rows, ["B x H x L x D", "cpu ms", "tpu ms", "cpu/tpu", "max |diff|"]))


if __name__ == "__main__":
    main()
