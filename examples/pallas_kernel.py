"""A custom Pallas kernel as a torch op, trained through on the tpu device.

The kernel fuses ``relu(x + bias)``; ``torch.tpu.pallas.jax_op`` turns it into
a torch custom op (shapes from jax.eval_shape, autograd from the backward
given below).  Off a real TPU the kernel runs in Pallas' TPU interpret mode.

    python examples/pallas_kernel.py [--steps 20] [--compile]
"""
import argparse
import time

import jax
import jax.numpy as jnp
import torch
import torch.nn as nn
from jax.experimental import pallas as pl

import torch_tpu  # noqa: F401

ROWS_PER_TILE = 8


def _bias_relu_kernel(x_ref, b_ref, o_ref):
    o_ref[...] = jnp.maximum(x_ref[...] + b_ref[...], 0).astype(o_ref.dtype)


def _bias_relu_backward(x, bias, grad):
    # gradients of relu(x + bias): the same mask for both; bias sums over rows
    g = jnp.where(x + bias > 0, grad, 0)
    return g, g.sum(axis=0, keepdims=True)


@torch.tpu.pallas.jax_op("example::bias_relu", backward=_bias_relu_backward)
def bias_relu(x: jax.Array, bias: jax.Array) -> jax.Array:
    rows, cols = x.shape
    return pl.pallas_call(
        _bias_relu_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(rows // ROWS_PER_TILE,),
        in_specs=[pl.BlockSpec((ROWS_PER_TILE, cols), lambda i: (i, 0)),
                  pl.BlockSpec((1, cols), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((ROWS_PER_TILE, cols), lambda i: (i, 0)),
    )(x, bias)


class FusedMLP(nn.Module):
    def __init__(self, d_in=32, hidden=128, d_out=1):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden, bias=False)
        self.bias1 = nn.Parameter(torch.zeros(1, hidden))
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(bias_relu(self.fc1(x), self.bias1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compile", action="store_true", help="torch.compile(backend='tpu') the model")
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(64, 32)
    y = (x[:, :1] * 2 - x[:, 1:2]).relu()  # a target the MLP can fit
    model = FusedMLP().to("tpu")
    step_model = torch.compile(model, backend="tpu") if args.compile else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    xt, yt = x.to("tpu"), y.to("tpu")
    start = time.perf_counter()
    for step in range(args.steps):
        loss = nn.functional.mse_loss(step_model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    print(f"{args.steps} steps in {time.perf_counter() - start:.1f}s "
          f"(Pallas interpret mode: {torch.tpu.pallas.interpret_enabled()})")


if __name__ == "__main__":
    main()
