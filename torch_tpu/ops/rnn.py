"""Fused LSTM and GRU cells: what ``nn.LSTM``/``nn.GRU`` (and the ``*Cell``
modules) run on accelerators.  ATen's recurrent layers call these for CUDA,
XPU and privateuse1 inputs, with the gate matmuls already done, so each time
step is one elementwise kernel here.

The workspace handed from forward to backward is ours to lay out (only our
backward reads it): LSTM keeps the activated gates ``[i, f, g, o]`` (B, 4H);
GRU keeps ``[r, z, n, hx, hn]`` (B, 5H), ``hn`` being the hidden part of the
new gate before the reset gate scales it.  Gate math runs in the
accumulation dtype (float32 for half types), as ATen's kernels do.
"""
import jax
import jax.numpy as jnp

from ..dtypes import to_opmath
from .registry import register


def _gates(input_gates, hidden_gates, input_bias, hidden_bias):
    gates = to_opmath(input_gates) + to_opmath(hidden_gates)
    if input_bias is not None:
        gates = gates + to_opmath(input_bias)
    if hidden_bias is not None:
        gates = gates + to_opmath(hidden_bias)
    return gates


# meta=False: PyTorch's meta kernel for it fails when the biases are None
@register("_thnn_fused_lstm_cell.default", meta=False)
def _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    i, f, g, o = jnp.split(_gates(input_gates, hidden_gates, input_bias, hidden_bias), 4, axis=1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    cy = f * to_opmath(cx) + i * g
    hy = o * jnp.tanh(cy)
    dtype = input_gates.dtype
    return hy.astype(dtype), cy.astype(dtype), jnp.concatenate([i, f, g, o], axis=1).astype(dtype)


@register("_thnn_fused_lstm_cell_backward_impl.default", mask="has_bias",
          mask_of=lambda has_bias: (True, True, has_bias))
def _thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = jnp.split(to_opmath(workspace), 4, axis=1)
    cy = to_opmath(cy)
    dtype = workspace.dtype
    zeros = jnp.zeros(cy.shape, cy.dtype)
    dh = to_opmath(grad_hy) if grad_hy is not None else zeros
    tanh_cy = jnp.tanh(cy)
    dc = dh * o * (1 - tanh_cy * tanh_cy) + (to_opmath(grad_cy) if grad_cy is not None else zeros)
    grad_gates = jnp.concatenate([dc * g * i * (1 - i), dc * to_opmath(cx) * f * (1 - f),
                                  dc * i * (1 - g * g), dh * tanh_cy * o * (1 - o)], axis=1)
    outs = [grad_gates.astype(dtype), (dc * f).astype(cx.dtype)]
    if has_bias:
        outs.append(jnp.sum(grad_gates, axis=0).astype(dtype))
    return tuple(outs)


@register("_thnn_fused_gru_cell.default", meta=False)
def _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    ir, iz, in_ = jnp.split(to_opmath(input_gates), 3, axis=1)
    hr, hz, hn = jnp.split(to_opmath(hidden_gates), 3, axis=1)
    if input_bias is not None:
        bir, biz, bin_ = jnp.split(to_opmath(input_bias), 3)
        ir, iz, in_ = ir + bir, iz + biz, in_ + bin_
    if hidden_bias is not None:
        bhr, bhz, bhn = jnp.split(to_opmath(hidden_bias), 3)
        hr, hz, hn = hr + bhr, hz + bhz, hn + bhn
    h = to_opmath(hx)
    r = jax.nn.sigmoid(ir + hr)
    z = jax.nn.sigmoid(iz + hz)
    n = jnp.tanh(in_ + r * hn)
    hy = n + z * (h - n)
    dtype = input_gates.dtype
    return hy.astype(dtype), jnp.concatenate([r, z, n, h, hn], axis=1).astype(dtype)


@register("_thnn_fused_gru_cell_backward.default", mask="has_bias",
          mask_of=lambda has_bias: (True, True, True, has_bias, has_bias))
def _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, h, hn = jnp.split(to_opmath(workspace), 5, axis=1)
    dh = to_opmath(grad_hy)
    dtype = workspace.dtype
    dn = dh * (1 - z) * (1 - n * n)        # through tanh of the new gate
    dz = dh * (h - n) * z * (1 - z)
    dr = dn * hn * r * (1 - r)
    grad_input = jnp.concatenate([dr, dz, dn], axis=1)
    grad_hidden = jnp.concatenate([dr, dz, dn * r], axis=1)
    outs = [grad_input.astype(dtype), grad_hidden.astype(dtype), (dh * z).astype(grad_hy.dtype)]
    if has_bias:
        outs += [jnp.sum(grad_input, axis=0).astype(dtype), jnp.sum(grad_hidden, axis=0).astype(dtype)]
    return tuple(outs)
