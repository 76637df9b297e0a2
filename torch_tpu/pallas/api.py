"""``torch.tpu.pallas.jax_op`` and ``get_pallas_mesh`` (Google torch_tpu's names
and signature)."""
import numpy as np

import jax

from .. import runtime
from . import jax_op as _impl
from . import signature


def jax_op(name, fn=None, /, *, donate_argnums=None, mesh=None, input_partition_specs=None,
           output_partition_specs=None, backward=None):
    """Turn a JAX function into a torch custom op named ``name`` ("ns::op").

    Use as ``@jax_op("mylib::op")`` or ``jax_op("mylib::op", fn)``.  Every
    parameter needs an annotation: ``jax.Array`` parameters take tpu tensors,
    int/float/bool/str ones are static.  Output shapes and dtypes come from
    ``jax.eval_shape``.  Pallas kernels run interpreted off a real TPU.

    Gradients: ``jax.vjp`` of ``fn`` by default.  For a function JAX cannot
    differentiate (most ``pallas_call`` kernels) give ``backward=bwd`` or
    decorate ``@op.def_backward``: ``bwd`` takes ``fn``'s arguments followed by
    the output cotangent (a tuple of them for several outputs) and returns one
    gradient per ``jax.Array`` parameter (None for none).

    ``donate_argnums`` is accepted for compatibility; buffers are not donated
    (other views may still hold them).  ``mesh`` with partition specs runs the
    function under ``jax.shard_map``.
    """
    if not isinstance(name, str) or name.count("::") != 1 or not all(name.split("::")):
        raise ValueError(f"jax_op: name must look like 'namespace::op', got {name!r}")

    def decorate(f):
        return _define(name, f, donate_argnums, mesh, input_partition_specs,
                       output_partition_specs, backward)
    return decorate if fn is None else decorate(fn)


def _define(name, fn, donate_argnums, mesh, in_specs, out_specs, backward):
    if not callable(fn):
        raise TypeError(f"jax_op {name}: expected a callable, got {type(fn).__name__}")
    params = signature.params_of(fn, name)
    tensor_at = [i for i, p in enumerate(params) if p.is_tensor]
    if not tensor_at:
        raise ValueError(f"jax_op {name}: the function needs at least one jax.Array parameter")
    for i in donate_argnums or ():
        if i not in tensor_at:
            raise ValueError(f"jax_op {name}: donate_argnums entry {i} is not a jax.Array parameter")
    if mesh is not None and (in_specs is None or out_specs is None):
        raise ValueError(f"jax_op {name}: a mesh needs input_partition_specs and output_partition_specs")
    jf = _impl.JaxFunction(name, fn, params, signature.returns_of(fn, name), mesh, in_specs, out_specs)
    op_def, overload = _impl.define(name, jf)

    bwd_jf = _impl.JaxFunction(name + "_backward", None, _impl.backward_params(jf), "Tensor[]")
    bwd_jf.fn = _impl.user_backward(jf, backward) if backward else _impl.vjp_backward(jf)
    bwd_def, bwd_overload = _impl.define(name + "_backward", bwd_jf)
    hooks = _impl.Autograd(jf, bwd_def)
    op_def.register_autograd(hooks.backward, setup_context=hooks.setup_context)

    def def_backward(bwd):
        """Use ``bwd`` (see ``jax_op``) as this op's backward from now on."""
        bwd_jf.fn = _impl.user_backward(jf, bwd)
        bwd_jf._shapes.clear()
        _impl.registry.KERNELS[bwd_overload].cache.clear()
        return bwd

    op_def.def_backward = def_backward
    op_def.jax_function = fn
    op_def.backward_op = bwd_def
    return op_def


def get_pallas_mesh(axis_names, mesh_shape=None, process_group=None) -> jax.sharding.Mesh:
    """A ``jax.sharding.Mesh`` over this process's tpu device (one chip per process)."""
    axis_names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
    shape = tuple(mesh_shape) if mesh_shape is not None else (1,) * len(axis_names)
    if len(shape) != len(axis_names):
        raise ValueError(f"get_pallas_mesh: {len(axis_names)} axis names but mesh_shape {shape}")
    if int(np.prod(shape)) != 1:
        raise ValueError(f"get_pallas_mesh: mesh_shape {shape} needs {int(np.prod(shape))} devices; "
                         "this process drives one tpu device")
    devices = np.array([runtime.jax_device()], dtype=object).reshape(shape)
    return jax.sharding.Mesh(devices, axis_names)
