"""The TorchDynamo backend ``"tpu"``: Dynamo -> AOTAutograd (forward and
backward ATen graphs) -> one JAX function per graph -> one XLA executable.

A graph whose ops the lowering does not know runs through the eager tpu
kernels instead, with a warning naming the op.  Executables are cached in
memory per input signature and on disk by JAX's persistent compilation cache.
"""
import functools
import logging
import threading
import time
import warnings

import jax
import numpy as np
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from .. import dtypes, logs
from ..profiler import record as _prof
from ..device import rng
from ..eager import fusion, modes
from ..ops import registry
from ..storage import access, buffers
from . import lowering, options as compiler_options

log = logging.getLogger("torch_tpu.compile")


class Stats:
    def __init__(self):
        self.graphs = 0
        self.compiles = 0
        self.compile_seconds = 0.0
        self.eager_fallbacks = 0

    def as_dict(self):
        return {"graphs": self.graphs, "compiles": self.compiles,
                "compile_seconds": round(self.compile_seconds, 4),
                "eager_fallbacks": self.eager_fallbacks}


stats = Stats()


class CompiledGraph:
    """Runs one ATen graph as XLA executables, one per input signature."""

    def __init__(self, gm, name):
        self.gm = gm
        self.name = name
        self.fn = lowering.lower(gm)
        self.executables = {}
        self.lock = threading.Lock()
        self.xla_options = compiler_options.current()
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        self.out_vals = [n.meta.get("val") if isinstance(n, torch.fx.Node) else n
                         for n in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
        self.uses_rng = any(n.op == "call_function" and isinstance(registry.KERNELS.get(n.target), registry.Kernel)
                            and registry.KERNELS[n.target].opts.rng for n in gm.graph.nodes)

    def __call__(self, args):
        arrays, statics = [], []
        for a in args:
            if isinstance(a, torch.Tensor):
                arrays.append(access.read(a) if a.device.type == "tpu"
                              else jax.device_put(dtypes.numpy_from_cpu_tensor(a)))
                statics.append(None)
            else:
                statics.append(a)
        signature = (tuple((x.shape, x.dtype) for x in arrays), tuple(statics))
        exe = self.executables.get(signature)
        if exe is None:
            with self.lock:
                exe = self.executables.get(signature) or self._compile(signature, args, arrays)
        material = rng.next_key_material() if self.uses_rng else np.zeros(3, np.uint32)
        results = (exe(material, *arrays) if not _prof.torch_profiler._is_profiler_enabled
                   else _prof.run(f"compiled {self.name} graph", exe, [material, *arrays]))
        modes.after_op(f"compiled graph {self.name}", results)
        args.clear()  # boxed calling convention: let inputs die early
        return [self._wrap(r, v) for r, v in zip(results, self.out_vals)]

    def _compile(self, signature, args, arrays):
        statics = signature[1]
        fn = self.fn

        def with_statics(material, *arrays_):
            it = iter(arrays_)
            full = [next(it) if s is None else s for s in statics]
            return fn(material, *full)

        start = time.perf_counter()
        lowered = jax.jit(with_statics).lower(np.zeros(3, np.uint32), *arrays)
        exe = lowered.compile(compiler_options={**self.xla_options, **compiler_options.current()} or None)
        seconds = time.perf_counter() - start
        stats.compiles += 1
        stats.compile_seconds += seconds
        logs.graph_compile(self.name, signature, seconds, first=not self.executables)  # TORCH_TPU_LOGS
        if self.executables:
            log.info("torch_tpu: recompiling %s for new input shapes %s (%.2fs)",
                     self.name, [s for s, _ in signature[0]], seconds)
        else:
            log.debug("compiled %s in %.2fs", self.name, seconds)
        self.executables[signature] = exe
        return exe

    @staticmethod
    def _wrap(result, val):
        if not isinstance(val, torch.Tensor):
            return result
        if val.device.type == "cpu":
            from ..ops.core import to_cpu_tensor
            return to_cpu_tensor(buffers.wrap(result))
        if not all(isinstance(d, int) for d in (*val.shape, *val.stride())):
            return buffers.wrap(result)  # symbolic shape (dynamic=True): row-major
        spec = (tuple(val.shape), tuple(val.stride()), dtypes.to_np(val.dtype))
        return registry._make_output(registry._to_storage_layout(result, spec), spec)


def make_boxed_func_from(compiled):
    def run(args):
        return compiled(args)
    run._boxed_call = True
    return run


def _compiler(name):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        stats.graphs += 1
        try:
            compiled = CompiledGraph(gm, name)
        except lowering.LoweringError as e:
            stats.eager_fallbacks += 1
            warnings.warn(f"torch_tpu: torch.compile: {e}; this {name} graph runs through the "
                          "eager tpu kernels instead", stacklevel=2)
            return make_boxed_func(gm.forward)
        return make_boxed_func_from(compiled)
    return compile_graph


def _decompositions():
    # Decompose only the ops we cannot lower directly; keep the rest whole, so
    # layer_norm, SDPA and friends reach XLA as one op each.
    from torch._decomp import core_aten_decompositions
    table = core_aten_decompositions()
    return {op: fn for op, fn in table.items()
            if not isinstance(registry.KERNELS.get(op), registry.Kernel)
            and op not in lowering.VIEW_LOWERINGS}


@functools.lru_cache(maxsize=None)
def _aot_backend():
    return aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                        inference_compiler=_compiler("inference"),
                        decompositions=_decompositions(), keep_inference_input_mutations=False)


def tpu_backend(gm, example_inputs, mode=None, options=None):
    """``torch.compile(model, backend="tpu")``. ``mode`` is accepted (XLA already
    runs whole graphs, so "reduce-overhead" needs nothing more); ``options`` may
    carry XLA compiler options (see torch.tpu.compiler.custom_compiler_options)."""
    fusion.flush("torch.compile")
    if options:
        with compiler_options.custom_compiler_options(dict(options)):
            return _aot_backend()(gm, example_inputs)
    return _aot_backend()(gm, example_inputs)
