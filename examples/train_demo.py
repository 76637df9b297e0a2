"""Train a small CNN on the tpu device (synthetic data), with a progress bar.

    python examples/train_demo.py [--steps 60] [--mode strict|debug|fused]
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

import torch_tpu  # noqa: F401  (also autoloaded by `import torch`)


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.head = nn.Linear(32 * 7 * 7, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x.flatten(1))


def synthetic_batches(n_batches, batch, generator):
    """Noisy images whose class is which of 10 faint patches is brighter."""
    for _ in range(n_batches):
        y = torch.randint(0, 10, (batch,), generator=generator)
        x = torch.randn(batch, 1, 28, 28, generator=generator)
        for i, c in enumerate(y.tolist()):
            r, q = divmod(c, 5)
            x[i, 0, r * 14:r * 14 + 7, q * 5:q * 5 + 5] += 1.0
        yield x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--mode", default=None, help="eager mode: debug, strict or fused")
    parser.add_argument("--device", default="tpu", help="tpu, or cpu to compare")
    args = parser.parse_args()
    if args.mode:
        torch.tpu.set_eager_mode(args.mode)

    torch.manual_seed(0)
    device = torch.device(args.device)
    print(f"device: {device} backed by {torch.tpu.get_device_name()} "
          f"(eager mode: {torch.tpu.eager_mode.value})")
    model = SmallCNN().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)

    step_times = []
    bar = tqdm(synthetic_batches(args.steps, args.batch, gen), total=args.steps, unit="step")
    for x, y in bar:
        start = time.perf_counter()
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.4f}")
        step_times.append(time.perf_counter() - start)

    model.eval()
    with torch.no_grad():
        x, y = next(synthetic_batches(1, 256, gen))
        acc = (model(x.to(device)).argmax(1).cpu() == y).float().mean().item()
    steady = sorted(step_times[1:])[len(step_times[1:]) // 2] if len(step_times) > 1 else step_times[0]
    print(f"final loss {loss.item():.4f}, accuracy {acc:.2%}; first step (compiles kernels) "
          f"{step_times[0]:.1f} s, then {steady * 1000:.1f} ms/step")


if __name__ == "__main__":
    main()
