"""ATen FX graph -> one JAX function, built from the same op implementations the
eager kernels use (``Kernel.apply``), plus JAX forms of the view ops (which
eager serves by editing metadata)."""
import math
import operator

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from .. import dtypes
from ..casting import convert
from ..ops import registry
from ..storage import views as storage_views

aten = torch.ops.aten


class LoweringError(NotImplementedError):
    """The graph uses an op the lowering does not know."""


# ---- view ops as JAX functions -------------------------------------------------

def _dim(d, ndim):
    return d + ndim if d < 0 else d


def _slice(x, dim=0, start=None, end=None, step=1):
    dim = _dim(dim, x.ndim)
    size = x.shape[dim]
    start, end, step = slice(start, end, step).indices(size)
    return lax.slice_in_dim(x, start, max(start, end), step, axis=dim)


def _select(x, dim, index):
    dim = _dim(dim, x.ndim)
    index = index + x.shape[dim] if index < 0 else index
    return lax.index_in_dim(x, index, axis=dim, keepdims=False)


def _squeeze(x, dims=None):
    if dims is None:
        return jnp.squeeze(x)
    dims = [dims] if isinstance(dims, int) else dims
    dims = tuple(_dim(d, x.ndim) for d in dims if x.shape[_dim(d, x.ndim)] == 1) if x.ndim else ()
    return jnp.squeeze(x, dims) if dims else x


def _expand(x, size, implicit=False):
    size = list(size)
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return jnp.broadcast_to(x, shape)


def _view(x, size):
    return jnp.reshape(x, tuple(size))


def _as_strided(x, size, stride, storage_offset=None):
    # The input is a (logically contiguous) graph value: index its flat form.
    flat = x.reshape(-1)
    return storage_views._read_flat(flat, tuple(size), tuple(stride), storage_offset or 0)


def _split_with_sizes(x, sizes, dim=0):
    dim = _dim(dim, x.ndim)
    offsets = np.cumsum([0] + list(sizes))
    return [lax.slice_in_dim(x, int(offsets[i]), int(offsets[i + 1]), axis=dim) for i in range(len(sizes))]


def _split(x, split_size, dim=0):
    dim = _dim(dim, x.ndim)
    n = x.shape[dim]
    sizes = [min(split_size, n - i) for i in range(0, n, split_size)] or [0]
    return _split_with_sizes(x, sizes, dim)


def _unbind(x, dim=0):
    dim = _dim(dim, x.ndim)
    return [lax.index_in_dim(x, i, axis=dim, keepdims=False) for i in range(x.shape[dim])]


def _diagonal(x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, _dim(dim1, x.ndim), _dim(dim2, x.ndim))


# ---- the views' functional inverses (backward graphs of slicing and indexing) ----

def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    dim = _dim(dim, x.ndim)
    start, end, step = slice(start, end, step).indices(x.shape[dim])
    where = [slice(None)] * x.ndim
    where[dim] = slice(start, max(start, end), step)
    return x.at[tuple(where)].set(src.astype(x.dtype))


def _select_scatter(x, src, dim, index):
    dim = _dim(dim, x.ndim)
    where = [slice(None)] * x.ndim
    where[dim] = index + x.shape[dim] if index < 0 else index
    return x.at[tuple(where)].set(src.astype(x.dtype))


def _diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    d1, d2 = _dim(dim1, x.ndim), _dim(dim2, x.ndim)
    moved = jnp.moveaxis(x, (d1, d2), (-2, -1))  # the diagonal is the last dim, as torch.diagonal's
    n = src.shape[-1]
    rows = np.arange(n) + max(-offset, 0)
    cols = np.arange(n) + max(offset, 0)
    return jnp.moveaxis(moved.at[..., rows, cols].set(src.astype(x.dtype)), (-2, -1), (d1, d2))


def _unfold(x, dimension, size, step):
    dim = _dim(dimension, x.ndim) if x.ndim else 0
    if x.ndim == 0:
        return x.reshape(1)
    count = (x.shape[dim] - size) // step + 1
    idx = np.arange(count)[:, None] * step + np.arange(size)[None, :]
    taken = jnp.take(x, idx, axis=dim)  # dims: ..., count, size, ...
    return jnp.moveaxis(taken, dim + 1, -1)


def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if not hasattr(x, "dtype"):  # a CPU scalar lowered as a Python number (compile/host.py keeps few on the host)
        x = jnp.asarray(x)
    return convert(x, dtypes.to_np(dtype)) if dtype is not None else x


VIEW_LOWERINGS = {
    aten.view.default: _view,
    aten._unsafe_view.default: _view,
    aten._reshape_alias.default: lambda x, size, stride: jnp.reshape(x, tuple(size)),
    aten.reshape.default: _view,
    aten.view.dtype: lambda x, dtype: storage_views._from_bytes(
        storage_views._to_bytes(x.reshape(-1)), dtypes.to_np(dtype)).reshape(
            x.shape[:-1] + (x.shape[-1] * x.dtype.itemsize // dtypes.to_np(dtype).itemsize,)
            if x.ndim else ()),
    aten.alias.default: lambda x: x,
    aten._conj.default: jnp.conj,  # a lazy-conjugate view: inside a graph, its value
    aten._neg_view.default: jnp.negative,
    aten.detach.default: lambda x: x,
    aten.lift_fresh_copy.default: lambda x: x,
    aten.clone.default: lambda x, memory_format=None: x,
    aten.t.default: lambda x: x.T if x.ndim == 2 else x,
    aten.transpose.int: lambda x, a, b: jnp.swapaxes(x, a, b),
    aten.permute.default: lambda x, dims: jnp.transpose(x, tuple(_dim(d, x.ndim) for d in dims)),
    aten.expand.default: _expand,
    aten.slice.Tensor: _slice,
    aten.select.int: _select,
    aten.unsqueeze.default: lambda x, d: jnp.expand_dims(x, _dim(d, x.ndim + 1)),
    aten.squeeze.default: lambda x: _squeeze(x),
    aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze,
    aten.as_strided.default: _as_strided,
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split_with_sizes,
    aten.unbind.int: _unbind,
    aten.diagonal.default: _diagonal,
    aten.unfold.default: _unfold,
    aten._to_copy.default: _to_copy,
    aten.view_as_real.default: lambda x: jnp.stack([jnp.real(x), jnp.imag(x)], -1),
    aten.view_as_complex.default: lambda x: lax.complex(x[..., 0], x[..., 1]),
    aten.slice_scatter.default: _slice_scatter,
    aten.select_scatter.default: _select_scatter,
    aten.diagonal_scatter.default: _diagonal_scatter,
    aten.repeat.default: lambda x, repeats: jnp.tile(x, tuple(repeats)),
    # not a view, but like one it only moves data: functional copy_ (x.copy_(y) on a graph input)
    aten.copy.default: lambda x, src, non_blocking=False: _copy_into_input(x, src),
}

# ---- factory ops (eager serves them through raw kernels writing out=) -------
# In a graph their shape and dtype are static, so the node's recorded value
# says what to build; device/layout/pin_memory are irrelevant inside XLA.

def _node_dtype(val):
    return dtypes.to_np(val.dtype)


def _static(shape):
    """The recorded shape when it is concrete; None when it is symbolic
    (dynamic=True: its example sizes are not this call's)."""
    shape = tuple(shape)
    return shape if all(isinstance(d, int) for d in shape) else None


def _arange(val, start, end=None, step=1, **_):
    if end is None:
        start, end = 0, start
    shape = _static(val.shape)
    n = shape[0] if shape is not None else max(0, math.ceil((end - start) / step))
    dt = _node_dtype(val)
    # PyTorch computes start + i*step in a wide accumulator, then casts
    acc = np.float64 if np.issubdtype(dt, np.floating) or any(
        isinstance(v, float) for v in (start, step)) else np.int64
    return (jnp.asarray(start, acc) + jnp.arange(n, dtype=acc) * jnp.asarray(step, acc)).astype(dt)


def _filled(fill, shape_of):
    """A factory filled with ``fill(args)``; ``shape_of(args)`` is its shape
    from this call's arguments, used when the recorded shape is symbolic."""
    def build(val, *args, **_):
        shape = _static(val.shape)
        if shape is None:  # a 0-d result's () is a static shape too
            shape = tuple(shape_of(args))
        return jnp.full(shape, fill(args), _node_dtype(val))
    return build


def _size(a):
    return a[0]


def _like(a):
    return a[0].shape


def _new(a):
    return a[1]


FACTORY_LOWERINGS = {
    aten.arange.default: _arange,
    aten.arange.start: _arange,
    aten.arange.start_step: _arange,
    aten.scalar_tensor.default: _filled(lambda a: a[0], lambda a: ()),
    aten.full.default: _filled(lambda a: a[1], _size),
    aten.full_like.default: _filled(lambda a: a[1], _like),
    aten.zeros.default: _filled(lambda a: 0, _size),
    aten.zeros_like.default: _filled(lambda a: 0, _like),
    aten.ones.default: _filled(lambda a: 1, _size),
    aten.ones_like.default: _filled(lambda a: 1, _like),
    aten.empty.memory_format: _filled(lambda a: 0, _size),
    aten.empty_like.default: _filled(lambda a: 0, _like),
    aten.empty_permuted.default: _filled(lambda a: 0, _size),
    aten._efficientzerotensor.default: _filled(lambda a: 0, _size),
    aten.new_empty.default: _filled(lambda a: 0, _new),
    aten.new_empty_strided.default: _filled(lambda a: 0, _new),
    aten.new_zeros.default: _filled(lambda a: 0, _new),
    aten.new_ones.default: _filled(lambda a: 1, _new),
    aten.new_full.default: _filled(lambda a: a[2], _new),
}

# prims that Dynamo or decompositions put in graphs; the result takes the node's dtype.
# (By name: prims.fma is defined by Inductor's prims, imported with Dynamo, not
# before: torch_tpu must not import Dynamo itself, see compile/__init__.py.)
PRIM_LOWERINGS = {
    # Dynamo writes addcmul_/addcdiv_(value=) and add_(alpha=tensor) as fma(a, b, c) = a*b + c
    "prims.fma.default": lambda a, b, c: a * b + c,
    "prims.convert_element_type.default": lambda x, dtype: x,
}

_PY_OPS = {operator.getitem: operator.getitem, operator.mul: operator.mul, operator.add: operator.add,
           operator.sub: operator.sub, operator.floordiv: operator.floordiv, operator.mod: operator.mod,
           operator.truediv: operator.truediv, operator.neg: operator.neg, math.ceil: math.ceil,
           math.floor: math.floor, torch.sym_int: int, torch.sym_float: float,
           torch.sym_max: max, torch.sym_min: min,
           # a size read off a graph value (static once traced)
           aten.sym_size.int: lambda x, dim: x.shape[dim], aten.sym_numel.default: lambda x: x.size}


def _meta_value(v):
    """The FakeTensor/number recorded for a node, as the meta value kernels expect."""
    if isinstance(v, torch.fx.Node):
        val = v.meta.get("val")
        if isinstance(val, torch.Tensor):
            return torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="meta")
        return val
    if isinstance(v, (list, tuple)):
        return type(v)(_meta_value(e) for e in v)
    return v


def _out_dtypes(node):
    """PyTorch's dtype for each output (None where an output is not a tensor)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    if not any(isinstance(v, torch.Tensor) for v in vals):
        return None
    return [dtypes.to_np(v.dtype) if isinstance(v, torch.Tensor) else None for v in vals]


_MASK_PUTS = (aten.index_put.default, aten.index_put_.default, aten._index_put_impl.default)


def _static_mask_put(node) -> bool:
    """Whether an index_put by a boolean mask lowers with static shapes: the
    mask must be the only index, and the values must not have a dimension for
    the selected elements (how many the mask selects is known only at run time)."""
    indices = [i.meta.get("val") if isinstance(i, torch.fx.Node) else None for i in node.args[1]]
    masks = [k for k, i in enumerate(indices) if i is not None and i.dtype in (torch.bool, torch.uint8)]
    if not masks:
        return True
    k = masks[0]
    if sum(i is not None for i in indices) != 1:
        return False
    trailing = node.args[0].meta["val"].dim() - k - indices[k].dim()
    values = node.args[2].meta["val"]
    return values.dim() <= trailing or values.shape[values.dim() - trailing - 1] == 1


def check_lowerable(gm: torch.fx.GraphModule) -> None:
    """Raise LoweringError naming the first op the lowering cannot handle."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        t = node.target
        val = node.meta.get("val")
        if free_unbacked_symbols(val):
            raise LoweringError(f"{t} has a data-dependent size (a boolean mask, nonzero, ...)")
        if t in _MASK_PUTS and not _static_mask_put(node):
            raise LoweringError(f"{t} writes one value per element a boolean mask selects "
                                "(how many is known only at run time)")
        if t is aten.copy_.default:
            continue
        if lowering_of(t) is None:
            raise LoweringError(f"no JAX lowering for {t}")
        if t in CONTROL_FLOW_LOWERINGS:
            for a in node.args:
                if isinstance(a, torch.fx.Node) and a.op == "get_attr":
                    check_lowerable(getattr(gm, a.target))


# Composite aliases a graph may keep (a dynamic-shape graph's true_divide, seen
# in GPT-2 with dynamic=True), computed as the op they stand for.
_SAME_AS = {aten.true_divide.Tensor: aten.div.Tensor, aten.true_divide.Scalar: aten.div.Scalar}


def lowering_of(t):
    """The one lookup of how a graph computes a call of ``t``: a function
    ``(node, args, kwargs, keys) -> value`` (``keys``: the graph call's
    ``_Keys``), or None.  Python operators, views, factories, control flow and
    prims have lowerings here; every other op runs its registered graph form
    (``registry.GraphForm``)."""
    t = _SAME_AS.get(t, t)
    if t in _PY_OPS:
        return lambda node, args, kwargs, keys, f=_PY_OPS[t]: f(*args, **kwargs)
    if t in VIEW_LOWERINGS:
        return lambda node, args, kwargs, keys, f=VIEW_LOWERINGS[t]: f(*args, **kwargs)
    if t in FACTORY_LOWERINGS:
        return lambda node, args, kwargs, keys, f=FACTORY_LOWERINGS[t]: f(node.meta["val"], *args, **kwargs)
    if t in CONTROL_FLOW_LOWERINGS:
        return lambda node, args, kwargs, keys, f=CONTROL_FLOW_LOWERINGS[t]: f(keys.material, *args, **kwargs)
    if isinstance(t, torch._ops.OpOverload) and str(t) in PRIM_LOWERINGS:
        return lambda node, args, kwargs, keys, f=PRIM_LOWERINGS[str(t)]: convert(
            jnp.asarray(f(*args, **kwargs)), _node_dtype(node.meta["val"]))
    form = registry.graph_form(t)
    if form is None:
        return None
    return lambda node, args, kwargs, keys: _run_graph_form(form, node, args, kwargs, keys)


def _run_graph_form(form, node, args, kwargs, keys):
    key = keys.for_node(node) if form.opts.rng else None
    promote = form.promote_dtype(_meta_value(node.args), _meta_value(dict(node.kwargs)))
    kwargs = {k: v for k, v in kwargs.items() if not isinstance(v, torch.Generator)}
    outs = form.apply(list(args), kwargs, promote, _out_dtypes(node), key)
    return tuple(outs) if isinstance(node.meta.get("val"), (list, tuple)) else outs[0]


class _Keys:
    """The random keys of one graph call: one per random node, from the call's
    (seed, counter) material, as eager ops take theirs."""

    def __init__(self, material, nodes):
        self.material = material
        self.index = {n: i for i, n in enumerate(nodes)}
        self.base = None

    def for_node(self, node):
        if self.base is None:
            self.base = registry.make_key(self.material)
        return jax.random.fold_in(self.base, self.index[node])


def mutated_inputs(gm: torch.fx.GraphModule, host_nodes=frozenset()):
    """Indices of the graph inputs that ``copy_`` nodes write (AOTAutograd leaves
    input mutations in inference graphs as ``copy_`` into the placeholder),
    except the copies done on the host."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    written = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.copy_.default and node not in host_nodes:
            dst = node.args[0]
            if dst not in placeholders:
                raise LoweringError("copy_ into an intermediate value of the graph")
            index = placeholders.index(dst)
            if index not in written:
                written.append(index)
    return written


def _copy_into_input(dst, src):
    dst = jnp.asarray(dst)
    return jnp.broadcast_to(convert(jnp.asarray(src), dst.dtype), dst.shape)


def lower(gm: torch.fx.GraphModule, skip_outputs=frozenset(), host=None):
    """A traceable function ``(rng_material, *inputs, *host_packs) -> (outputs,
    new_values)`` for the graph; ``new_values`` are the final contents of the
    inputs listed in its ``mutated_inputs`` attribute (see ``mutated_inputs``),
    in that order.  Outputs at the indices in ``skip_outputs`` come back as None
    (the caller makes them itself, e.g. as views of its inputs).  ``host`` (a
    ``host.HostPart``) names the nodes computed on the host: their values that
    device nodes read arrive as ``host_packs``; the rest are not traced."""
    check_lowerable(gm)
    nodes = list(gm.graph.nodes)
    host_nodes = host.nodes if host else frozenset()
    written = mutated_inputs(gm, host_nodes)
    n_inputs = sum(1 for n in nodes if n.op == "placeholder")

    def run(rng_material, *inputs):
        env = host.unpack(inputs[n_inputs:]) if host else {}
        it = iter(inputs[:n_inputs])
        keys = _Keys(rng_material, nodes)
        placeholders = []
        for node in nodes:
            if node.op == "placeholder":
                env[node] = next(it)
                placeholders.append(node)
            elif node in host_nodes:
                continue
            elif node.op == "call_function" and node.target is aten.copy_.default:
                dst, src = node.args[0], node.args[1]
                # later reads of the input see the new value, as after an in-place copy
                env[node] = env[dst] = _copy_into_input(env[dst], env[src] if isinstance(src, torch.fx.Node) else src)
            elif node.op == "get_attr":
                env[node] = _constant(getattr(gm, node.target))
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                env[node] = lowering_of(node.target)(node, args, kwargs, keys)
            elif node.op == "output":
                outputs = node.args[0]
                if skip_outputs:
                    outputs = type(outputs)(None if i in skip_outputs else o for i, o in enumerate(outputs))
                return env_lookup(outputs, env), tuple(env[placeholders[i]] for i in written)
        raise AssertionError("graph has no output")
    run.mutated_inputs = written
    return run


# ---- torch.cond / while_loop as lax.cond / lax.while_loop --------------------------

def _subgraph(gm):
    """A lowered subgraph as ``(rng_material, *inputs) -> tuple of outputs``."""
    run = lower(gm)

    def call(rng_material, *inputs):
        out = run(rng_material, *inputs)[0]
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)
    return call


def _cond(rng_material, pred, true_gm, false_gm, operands):
    branches = [_subgraph(g) for g in (true_gm, false_gm)]
    pred = jnp.asarray(pred).reshape(())
    return lax.cond(pred, *(lambda ops, b=b: b(rng_material, *ops) for b in branches), tuple(operands))


def _while_loop(rng_material, cond_gm, body_gm, carried, additional):
    test, body = _subgraph(cond_gm), _subgraph(body_gm)
    carried = tuple(jnp.asarray(c) for c in carried)

    def step(carry):  # the carry keeps its dtypes (lax.while_loop requires it)
        return tuple(jnp.asarray(n, c.dtype) for n, c in zip(body(rng_material, *carry, *additional), carry))
    return lax.while_loop(lambda carry: jnp.asarray(test(rng_material, *carry, *additional)[0]).reshape(()),
                          step, carried)


CONTROL_FLOW_LOWERINGS = {
    torch.ops.higher_order.cond: _cond,
    torch.ops.higher_order.while_loop: _while_loop,
}


def env_lookup(out, env):
    return torch.fx.node.map_arg(out, lambda n: env[n])


def _constant(value):
    if isinstance(value, torch.Tensor):
        from ..eager import access
        if value.device.type == "tpu":
            return access.read(value)
        return jnp.asarray(dtypes.numpy_from_cpu_tensor(value))
    return value
