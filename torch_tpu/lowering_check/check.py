"""``torch.tpu.lowering_check``: does a torch program lower for a TPU?

The function runs once under ``torch.compile`` with a backend built from the
``"tpu"`` backend's own pieces (same AOTAutograd decompositions, same
``CompiledGraph``), with kernels picked as on a TPU (``target.kernels_for``).
Each graph's JAX program, the exact one ``torch.compile(backend="tpu")``
would compile, is then exported with ``jax.export`` for the TPU platform once
per chip generation, Pallas kernels going through Mosaic's TPU lowering.  The
graphs also run here (their Pallas kernels interpreted), so a training step
proceeds through its backward and optimizer graphs as it would on a TPU.
"""
import dataclasses
import itertools
import warnings

import jax
import numpy as np
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.utils import counters
from torch._functorch.aot_autograd import make_boxed_func

from .. import runtime, target
from ..compile import backend, lowering
from ..eager import fusion
from . import analysis, chips as chip_table


@dataclasses.dataclass
class GraphResult:
    """One graph (per input signature) and how its lowering went per chip."""
    graph: str                  # "forward 1", "backward 1", "inference 2"...
    inputs: list                # "bf16[8, 64, 128]" per array input
    errors: dict                # chip name -> first line of the error, or None when it lowered
    contents: analysis.Contents = None  # what the program holds (from the first chip that lowered)
    stablehlo: dict = dataclasses.field(default_factory=dict, repr=False)  # chip -> module text

    @property
    def lowered(self) -> bool:
        return all(e is None for e in self.errors.values())

    @property
    def kernels(self) -> list:
        return self.contents.kernels if self.contents else []

    def poor_dtypes(self) -> list:
        return self.contents.poor_dtypes() if self.contents else []


@dataclasses.dataclass
class Report:
    chips: tuple
    graphs: list
    graph_breaks: dict = dataclasses.field(default_factory=dict)  # Dynamo's reason -> count

    @property
    def ok(self) -> bool:
        """Every graph lowered for every chip."""
        return bool(self.graphs) and all(g.lowered for g in self.graphs)

    def kernels(self) -> list:
        return [k for g in self.graphs for k in g.kernels]

    def _rows(self):
        for g in self.graphs:
            status = ["ok" if g.errors[c] is None else "FAILED" for c in self.chips]
            kernels = ", ".join(f"{k} x{n}" for k, n in _counts(g.kernels)) or "-"
            yield g, status, kernels, "; ".join(g.poor_dtypes()) or "-"

    def __str__(self) -> str:
        lines = [f"TPU lowering check for {', '.join(self.chips)}: "
                 + (f"all {len(self.graphs)} graphs lowered" if self.ok else
                    f"{sum(not g.lowered for g in self.graphs)} of {len(self.graphs)} graphs failed")]
        for g, status, kernels, dtypes in self._rows():
            lines.append(f"  {g.graph}: " + ", ".join(f"{c} {s}" for c, s in zip(self.chips, status)))
            lines.append(f"    inputs: {_short(g.inputs)}")
            lines.append(f"    Pallas kernels: {kernels}")
            lines.append(f"    poor dtypes: {dtypes}")
            for c in self.chips:
                if g.errors[c] is not None:
                    lines.append(f"    {c}: {g.errors[c]}")
        if not self.graphs:
            lines.append("  no graph was compiled (did the function run any tpu op?)")
        lines += self._break_lines("  ")
        return "\n".join(lines)

    def _break_lines(self, indent):
        if not self.graph_breaks:
            return []
        return ([f"{indent}graph breaks (the code between graphs runs eagerly and is not checked):"]
                + [f"{indent}  {n} x {reason.strip().splitlines()[0][:200]}" for reason, n in self.graph_breaks.items()])

    def markdown(self) -> str:
        head = "| graph | " + " | ".join(self.chips) + " | Pallas kernels | poor dtypes |"
        out = [head, "|" + "---|" * (len(self.chips) + 3)]
        for g, status, kernels, dtypes in self._rows():
            out.append(f"| {g.graph} | " + " | ".join(status) + f" | {kernels} | {dtypes} |")
        errors = [f"- {g.graph} on {c}: `{g.errors[c]}`" for g in self.graphs for c in self.chips
                  if g.errors[c] is not None]
        return "\n".join(out + ([""] + errors if errors else [])
                         + ([""] + self._break_lines("") if self.graph_breaks else []))


def _counts(names):
    return [(k, len(list(v))) for k, v in itertools.groupby(sorted(names))]


def _short(inputs, limit=6):
    return ", ".join(inputs[:limit]) + (f", ... ({len(inputs)} in all)" if len(inputs) > limit else "")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    for line in text.splitlines():
        if line.strip() and not line.startswith("---"):
            return f"{type(e).__name__}: {line.strip()}"[:500]
    return type(e).__name__


def _describe(a) -> str:
    dtype = np.dtype(a.dtype)
    return f"{dtype.name}{list(a.shape)}"


class _Session:
    def __init__(self, chips, keep_stablehlo, execute):
        self.chips = [chip_table.chip(c) for c in chips]
        self.keep = keep_stablehlo
        self.execute = execute
        self.graphs = []
        self.numbers = {}

    def name(self, kind):
        self.numbers[kind] = self.numbers.get(kind, 0) + 1
        return f"{kind} {self.numbers[kind]}"

    def lower(self, graph, signature, arrays):
        """Export ``graph``'s program for each chip; returns (the exported
        program of the first chip that lowered or None, the program's scalar outputs)."""
        program, scalars = graph.program(signature)
        return self.lower_program(graph.check_name, program, (backend._NO_RNG, *arrays), 1), scalars

    def lower_program(self, name, program, arrays, hidden=0):
        """Export ``program(*arrays)`` for each chip (``hidden``: leading
        arguments the report does not list); the first exported program or None."""
        first = None
        specs = [jax.ShapeDtypeStruct(np.shape(a), a.dtype) for a in arrays]
        result = GraphResult(name, [_describe(a) for a in arrays[hidden:]], {})
        for c in self.chips:
            try:
                with target.lowering_for_tpu(), chip_table.lowering_for(c):
                    exported = jax.export.export(jax.jit(program), platforms=["tpu"])(*specs)
                text = exported.mlir_module()
            except Exception as e:  # the report carries it: the check itself goes on
                result.errors[c.name] = _first_line(e)
                continue
            result.errors[c.name] = None
            if result.contents is None:
                result.contents = analysis.contents(text)
                first = exported
            if self.keep:
                result.stablehlo[c.name] = text
        self.graphs.append(result)
        return first

    def not_lowered(self, name, error):
        self.graphs.append(GraphResult(name, [], {c.name: error for c in self.chips}))


class _CheckedGraph(backend.CompiledGraph):
    """A compiled graph that, before building its CPU executable for a new
    input signature, lowers the same program for each TPU chip."""

    def __init__(self, gm, name, session):
        super().__init__(gm, name)
        self.session = session
        self.check_name = session.name(name)

    def _compile(self, signature, arrays):
        exported, scalars = self.session.lower(self, signature, arrays)
        if self.session.execute or exported is None:
            return super()._compile(signature, arrays)
        if self.scalar_outputs is not None:
            self.scalar_outputs[signature] = scalars
        # host zeros moved to the device: no executable to compile per shape
        device = runtime.jax_device()
        zeros = [jax.device_put(np.zeros(a.shape, a.dtype), device) for a in exported.out_avals]
        exe = self.executables[signature] = lambda *_: jax.tree.unflatten(exported.out_tree, zeros)
        return exe


def _compiler(kind, session):
    def compile_graph(gm, example_inputs):
        try:
            compiled = _CheckedGraph(gm, kind, session)
        except lowering.LoweringError as e:  # torch.compile would run this graph eagerly
            session.not_lowered(session.name(kind), f"not lowered by torch_tpu's compile path: {e}")
            return make_boxed_func(gm.forward)
        return backend.make_boxed_func_from(compiled)
    return compile_graph


def _backend(session):
    aot = aot_autograd(fw_compiler=_compiler("forward", session),
                       bw_compiler=_compiler("backward", session),
                       inference_compiler=_compiler("inference", session),
                       decompositions=backend._decompositions(), keep_inference_input_mutations=True)

    def check_backend(gm, example_inputs):
        fusion.flush("torch.tpu.lowering_check")
        with backend._data_dependent_sizes_allowed(example_inputs):
            return aot(gm, example_inputs)
    return check_backend


def lowering_check(fn, *example_inputs, chips=chip_table.DEFAULT_CHIPS, execute=True,
                   keep_stablehlo=False, **example_kwargs) -> Report:
    """Lower ``fn(*example_inputs, **example_kwargs)`` for TPU generations
    ``chips`` (any of ``"v4", "v5e", "v5p", "v6e", "v7x"``) without a TPU.

    ``fn`` takes tpu tensors, as under ``torch.compile(backend="tpu")``; it
    runs once here (a training step trains one step).  ``execute=False``
    lowers without running: each graph returns zeros of its output shapes
    (much faster where Pallas kernels would run interpreted; values are then
    meaningless).  ``keep_stablehlo``: keep each program's text in the report.
    Returns a ``Report``:
    per graph and chip whether it lowered or the first error, the Pallas
    (Mosaic) kernels it holds, and the dtypes a TPU handles poorly.  A lowered
    program is not yet compiled: Mosaic and XLA compilation, VMEM fit and
    speed are decided on the TPU (see the guide).  Like
    ``torch._dynamo.reset()``, it clears Dynamo's compiled code before and
    after: functions compiled earlier recompile on their next call.
    """
    session = _Session(chips, keep_stablehlo, execute)
    breaks = counters["graph_break"]
    before = dict(breaks)
    # Dynamo keeps compiled code per function: start from none (a function
    # checked or compiled before would otherwise reuse it, or hit the
    # recompile limit) and leave none built for the check behind.
    torch._dynamo.reset()
    try:
        compiled = torch.compile(fn, backend=_backend(session))
        with target.kernels_for("tpu"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the report says which graphs did not lower
            compiled(*example_inputs, **example_kwargs)
    finally:
        torch._dynamo.reset()
    graph_breaks = {k: v - before.get(k, 0) for k, v in breaks.items() if v > before.get(k, 0)}
    return Report(tuple(c.name for c in session.chips), session.graphs, graph_breaks)


def lower_jax(fn, *specs, chips=chip_table.DEFAULT_CHIPS, name=None, keep_stablehlo=False) -> Report:
    """The same check for a JAX function (a kernel, a ``jax_op`` body) on
    ``jax.ShapeDtypeStruct`` (or array) arguments: one graph in the report."""
    session = _Session(chips, keep_stablehlo, execute=False)
    session.lower_program(name or getattr(fn, "__name__", "jax function"), fn, specs)
    return Report(tuple(c.name for c in session.chips), session.graphs)
