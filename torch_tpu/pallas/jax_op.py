"""``jax_op``: a JAX function (which may call ``pl.pallas_call``) as a real
``torch.library`` custom op on the tpu device.

* schema: generated from the function's annotations (``signature.py``);
* fake/meta kernel: ``jax.eval_shape`` of the function on the inputs' shapes,
  so FakeTensor, meta and Dynamo see the outputs without running anything;
* tpu kernel: ``registry.register``-ed, its implementation calls the function.
  It runs in every eager mode, and ``compile/lowering.py`` inlines it into
  torch.compile graphs like any other functional kernel;
* autograd: a second op computing ``jax.vjp`` of the function, or running a
  user-given backward JAX function.
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import dtypes
from ..ops import registry
from ..unsupported import UnsupportedOnTpu
from . import interpret, signature

def _np_dtype(op_name, dtype):
    try:
        return dtypes.to_np(dtype)
    except UnsupportedOnTpu:  # a custom op's argument: say which op, and how to fix it
        raise TypeError(f"{op_name}: dtype {dtype} has no JAX equivalent; "
                        "cast the tensor first (e.g. .float())") from None


def _static_key(value):
    return tuple(_static_key(v) for v in value) if isinstance(value, (list, tuple)) else value


class JaxFunction:
    """One JAX function seen through a schema: calls it on traced values with the
    outputs normalised to a list, and computes output shapes for the fake kernel."""

    def __init__(self, op_name, fn, params, returns, mesh=None, in_specs=None, out_specs=None):
        self.op_name = op_name
        self.fn = fn
        self.params = params
        self.returns = returns
        self.count = signature.output_count(returns)
        self.mesh, self.in_specs, self.out_specs = mesh, in_specs, out_specs
        self._shapes = {}

    def bind(self, values):
        """Positional values in schema order -> (args, kwargs) for the Python function."""
        args, kwargs = [], {}
        for p, v in zip(self.params, values):
            if p.kwarg_only:
                kwargs[p.name] = v
            else:
                args.append(v)
        return args, kwargs

    def flat(self, args, kwargs):
        """Dispatcher-style (args, kwargs) -> all values in schema order."""
        values = list(args)
        for p in self.params[len(values):]:
            values.append(kwargs[p.name] if p.name in kwargs else p.default)
        return values

    def call(self, *args, **kwargs):
        values = self.flat(args, kwargs)
        with interpret.context():
            out = self._run(values)
        return self.check_outputs(out)

    def _run(self, values):
        if self.mesh is None:
            a, k = self.bind(values)
            return self.fn(*a, **k)
        tensor_at = [i for i, p in enumerate(self.params) if p.is_tensor]

        def body(*arrays):
            full = list(values)
            for i, x in zip(tensor_at, arrays):
                full[i] = x
            a, k = self.bind(full)
            return self.fn(*a, **k)
        in_specs = tuple(self.in_specs) if self.in_specs is not None else None
        mapped = jax.shard_map(body, mesh=self.mesh, in_specs=in_specs,
                               out_specs=self.out_specs, check_vma=False)
        return mapped(*[values[i] for i in tensor_at])

    def check_outputs(self, out) -> list:
        leaves = out if isinstance(out, (tuple, list)) else [out]
        if not all(isinstance(x, jax.Array) for x in leaves):
            bad = next(type(x).__name__ for x in leaves if not isinstance(x, jax.Array))
            raise TypeError(f"{self.op_name}: the JAX function must return a jax.Array or a "
                            f"tuple/list of them, but it returned a {bad}")
        if self.count == 1 and isinstance(out, (tuple, list)):
            raise TypeError(f"{self.op_name}: the JAX function returned a {type(out).__name__} of "
                            f"{len(out)} arrays; annotate its return type (e.g. "
                            "-> tuple[jax.Array, jax.Array]) so the op's schema matches")
        if self.count not in (None, len(leaves)):
            raise TypeError(f"{self.op_name}: the JAX function returned {len(leaves)} arrays but "
                            f"its return annotation promises {self.count}")
        return list(leaves)

    def output_shapes(self, values) -> list:
        """``jax.ShapeDtypeStruct`` per output for tensors/statics ``values`` (cached)."""
        dynamic, key = {}, []
        for i, (p, v) in enumerate(zip(self.params, values)):
            if p.is_tensor and v is not None:
                dynamic[i] = self._spec(v)  # a Tensor, or a list of them (Tensor[])
                key.append(tuple((s.shape, s.dtype) for s in jax.tree_util.tree_leaves(dynamic[i])))
            else:
                key.append(("static", _static_key(v)))
        key = tuple(key)
        shapes = self._shapes.get(key)
        if shapes is None:
            def probe(arrays):
                full = list(values)
                for i, x in arrays.items():
                    full[i] = x
                return self.call(*full)
            shapes = self._shapes[key] = jax.eval_shape(probe, dynamic)
        return shapes

    def _spec(self, v):
        if isinstance(v, (list, tuple)):
            return [self._spec(e) for e in v]
        shape = tuple(_concrete(self.op_name, s) for s in v.shape)
        return jax.ShapeDtypeStruct(shape, _np_dtype(self.op_name, v.dtype))


def _concrete(op_name, size):
    if isinstance(size, int):
        return size
    try:  # a symbolic size: specialise on its value (PyTorch records the guard)
        return int(size)
    except Exception:
        raise RuntimeError(f"{op_name}: a jax_op needs concrete input shapes; got the "
                           f"symbolic size {size}") from None


def _device_of(values):
    flat = [e for v in values for e in (v if isinstance(v, (list, tuple)) else [v])]
    return next(v.device for v in flat if isinstance(v, torch.Tensor))


def _fake_kernel(jf: JaxFunction):
    def fake(*args, **kwargs):
        values = jf.flat(args, kwargs)
        device = _device_of(values)
        outs = [torch.empty(s.shape, dtype=_torch_dtype(jf.op_name, s.dtype), device=device)
                for s in jf.output_shapes(values)]
        return outs[0] if jf.returns == "Tensor" else (outs if jf.returns == "Tensor[]" else tuple(outs))
    return fake


def _torch_dtype(op_name, np_dtype):
    try:
        return dtypes.to_torch(np_dtype)
    except KeyError:
        raise TypeError(f"{op_name}: the JAX function returns dtype {np_dtype}, "
                        "which has no torch equivalent") from None


def _cpu_kernel(op_name):
    def not_on_tpu(*args, **kwargs):
        devices = sorted({str(v.device) for v in list(args) + list(kwargs.values())
                          if isinstance(v, torch.Tensor)})
        raise RuntimeError(f"{op_name} is a tpu op (a JAX function); its inputs are on "
                           f"{', '.join(devices) or 'no device'}. Move them with .to('tpu')")
    return not_on_tpu


def define(name, jf: JaxFunction):
    """Create the custom op ``name`` for ``jf`` and install its tpu kernel."""
    schema = signature.schema(jf.params, jf.returns)
    op_def = torch.library.custom_op(name, _cpu_kernel(name), mutates_args=(), schema=schema)
    op_def.register_fake(_fake_kernel(jf))
    ns, opname = name.split("::")
    overload = getattr(getattr(torch.ops, ns), opname).default
    registry.register(overload, variants=False)(jf.call)  # eager kernel and graph form
    return op_def, overload


# ---- autograd ----------------------------------------------------------------

def _inexact(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.inexact)


def grad_slots(params) -> list:
    """Parameters that get a gradient slot: single tensors (lists of tensors get none)."""
    return [i for i, p in enumerate(params) if p.type in ("Tensor", "Tensor?")]


def _no_grad(value):
    # a placeholder the backward op returns where there is no gradient
    return jnp.zeros((0,), jnp.float32) if value is None else jnp.zeros_like(value)


def vjp_backward(jf: JaxFunction):
    """A backward JAX function from ``jax.vjp``: (forward values..., cotangents) ->
    one gradient per tensor parameter (zeros for integer inputs)."""
    tensor_at = grad_slots(jf.params)

    def backward(*values):
        values, cts = list(values[:-1]), list(values[-1])
        diff_at = [i for i in tensor_at if values[i] is not None and _inexact(values[i].dtype)]

        def f(*diff):
            full = list(values)
            for i, x in zip(diff_at, diff):
                full[i] = x
            a, k = jf.bind(full)
            return jf.check_outputs(jf.fn(*a, **k))
        with interpret.context():
            outs, pullback = jax.vjp(f, *[values[i] for i in diff_at])
            cts = [ct.astype(o.dtype) if _inexact(o.dtype) else np.zeros(o.shape, jax.dtypes.float0)
                   for ct, o in zip(cts, outs)]
            grads = dict(zip(diff_at, pullback(cts)))
        return [grads[i] if i in grads else _no_grad(values[i]) for i in tensor_at]
    return backward


def user_backward(jf: JaxFunction, bwd):
    """Adapt ``bwd(*forward args, cotangents) -> grads`` to the backward-op convention."""
    tensor_at = grad_slots(jf.params)

    def backward(*values):
        values, cts = list(values[:-1]), list(values[-1])
        a, k = jf.bind(values)
        with interpret.context():
            grads = bwd(*a, cts[0] if jf.returns == "Tensor" else tuple(cts), **k)
        grads = list(grads) if isinstance(grads, (tuple, list)) else [grads]
        if len(grads) != len(tensor_at):
            raise TypeError(f"{jf.op_name}: the backward function returned {len(grads)} gradients; "
                            f"expected one per jax.Array parameter ({len(tensor_at)})")
        return [_no_grad(values[i]) if g is None or values[i] is None
                else jnp.asarray(g).astype(values[i].dtype).reshape(values[i].shape)
                for g, i in zip(grads, tensor_at)]
    return backward


def backward_params(jf: JaxFunction):
    params = [signature.Param(p.name, p.type) for p in jf.params]
    return params + [signature.Param("_grads", "Tensor[]")]


class Autograd:
    """``register_autograd`` hooks: save the inputs, call the backward op."""

    def __init__(self, jf: JaxFunction, backward_op):
        self.jf = jf
        self.backward_op = backward_op
        self.tensor_at = grad_slots(jf.params)  # saved for backward; Tensor[] stay in statics

    def setup_context(self, ctx, inputs, output, keyword_only_inputs=None):
        values = list(inputs) + [keyword_only_inputs[p.name] for p in self.jf.params
                                 if p.kwarg_only] if keyword_only_inputs else list(inputs)
        ctx.save_for_backward(*[values[i] for i in self.tensor_at])
        ctx.statics = [None if i in self.tensor_at else v for i, v in enumerate(values)]
        outs = output if isinstance(output, (tuple, list)) else [output]
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in outs]

    def backward(self, ctx, *grads):
        values = list(ctx.statics)
        for i, t in zip(self.tensor_at, ctx.saved_tensors):
            values[i] = t
        if len(grads) == 1 and isinstance(grads[0], (list, tuple)):
            grads = grads[0]  # a Tensor[] output hands its gradients over as one list
        grads = [torch.zeros(s, dtype=d, device=dev) if g is None else g
                 for g, (s, d, dev) in zip(grads, ctx.out_meta)]
        result = self.backward_op(*values, list(grads))
        result = list(result) if isinstance(result, (list, tuple)) else [result]
        # list inputs want a list of (no) gradients back: custom_op checks the structure
        out = [[None] * len(v) if isinstance(v, (list, tuple)) else None for v in values]
        for i, g in zip(self.tensor_at, result):
            if values[i] is not None and ctx.needs_input_grad[i] and values[i].is_floating_point():
                out[i] = g
        # one entry per argument autograd saw: keyword-only ones and trailing
        # defaults the dispatcher dropped take none
        return tuple(out[:len(ctx.needs_input_grad)])
