"""Host overhead held to budgets that count instead of time (deterministic):
XLA executables launched per training step, and Python-level calls made by
torch_tpu's own code per cached op or step.  benchmarks/overhead.py measures
the time; these fail as soon as a change adds host work.  A budget that a
change lowers should be lowered with it."""
import os
import sys

import jax
import pytest
import torch
import torch.nn as nn

import torch_tpu
from torch_tpu import native
from torch_tpu.eager import access
from torch_tpu.ops import registry
from torch_tpu.profiler import python_calls

PACKAGE = os.path.dirname(os.path.abspath(torch_tpu.__file__))


def calls_in_torch_tpu(fn, prefix=PACKAGE):
    """The Python function calls and C calls that torch_tpu's own code makes
    while ``fn()`` runs on this thread (torch.tpu.profiler.python_calls);
    ``prefix=""``: every package's."""
    if not native.status().startswith("C++"):  # (CI builds it, as the README's install does)
        pytest.skip(f"the budgets count the native helper's path; it is not in use: {native.status()}")
    return python_calls(fn, prefix)


class Launches:
    """Counts XLA executables launched through ``jax.stages.Compiled`` (fused
    chains and compiled graphs), on any thread (backward runs on autograd's)."""

    def __enter__(self):
        self.count, self._original = 0, jax.stages.Compiled.__call__
        original = self._original

        def counted(exe, *args):
            self.count += 1
            return original(exe, *args)
        jax.stages.Compiled.__call__ = counted
        return self

    def __exit__(self, *exc):
        jax.stages.Compiled.__call__ = self._original


def _training_step(compiled):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8).to("tpu"), torch.randn(4, 4).to("tpu")

    def step():
        loss = (model(x) - y).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    step = torch.compile(step, backend="tpu") if compiled else step
    return lambda: step().item()


# ---- budgets (measured with jax 0.10.2, torch 2.13, Python 3.11; a point or
# two of headroom) ---------------------------------------------------------------
# Compiled: the forward and backward graphs, recorded, run as one executable
# when the optimizer graph reads the gradients; the optimizer's executable
# (3 before issue 21's deferred training graphs: one per graph).
COMPILED_STEP_LAUNCHES = 2
# Fused: the chain the loss read needs, then the rest (backward, optimizer).
FUSED_STEP_LAUNCHES = 2
# torch_tpu's own calls per cached elementwise op (37 strict and 50 fused
# measured; 47 and 69 before issue 21's work; one run once gave a few more,
# hence the headroom).  Strict went 37 -> 36 with the output wrapped inline,
# then back to 37 with the output's storage swapped in (one C call more than
# the boxed set_, about half its time).  Fused kept 50 when the predicted op's
# signature came to be checked instead of rebuilt (as many calls, ~1 us less),
# then 50.5 -> 50.0 with the predicted op recorded straight from its entry
# (50 -> 49 before the per-call scalar checks of c53375b), then 50.0 -> 48.5
# (strict 37.5 -> 36.0) with is_conj asked of complex tensors only; then
# strict 36.0 -> 29.5 and fused 48.5 -> 45.5 when a cached signature came to
# be checked by a matcher (ops/signature_match.py: one C++ check for all the
# tensors; strict checks against the kernel's last signature instead of
# building its key).
# Since then 19.5 and 34.5 (issue 21's later work), and 27 and 42
# once the matchers' straight-line code came to be counted (it was compiled
# under the name "<string>", outside torch_tpu: 3.5 calls an op unseen); 24 and
# 39 with each output tensor made in one C++ call (native/tensors.cpp); fused
# 39 -> 23 with a predicted op recorded in C++ (native/recorder.cpp); 18.5 and
# 17.5 with the output's storage registered and accounted for in the same C++
# call as its tensor, and its death released in C++ (native/storages.cpp);
# fused 16.5 with the prediction read inline (no fusion.predicted frame);
# strict 18.0 with a number's device copy looked up in the matcher's code;
# strict 11.0 and fused 7.5 with the cached path entered in C++
# (native/entry.cpp: no Kernel.__call__, _matched or launch frames); strict
# 3.0 (pending.note) and fused 0 with the matchers' checks made in the
# entry's C++ (leaves.cpp's matcher_inputs) instead of their Python; strict 0
# with the launch appended to pending's queue there too.
STRICT_OP_CALLS = 1
FUSED_OP_CALLS = 1
# ... and per training step of the model above, on the host thread (the
# backward of an eager step runs on autograd's thread and is not counted):
# - compiled 934 (966 on 9388d5d, before a graph input that is its whole
#   buffer skipped the flat-storage test's calls; 1015 before issue 21; 938
#   before the compiled graphs asked
#   access.can_donate (+54, its per-buffer checks) and before the forward and
#   backward were deferred into one executable (+101: the backward's run moved
#   from autograd's thread into the flush on this one; the step's CPU time
#   fell); 1093 before a rewritten input's new buffer was swapped in by a
#   per-signature plan instead of access.write);
# - strict 1896 (2245 before issue 21; 1886 before the output storages were
#   swapped in, see above); kept at its old budget, 1.5% over;
# - fused 2096 (3372 before issue 21; 2360 before the predicted op's signature,
#   lists included, was checked instead of rebuilt; 2205 before the predicted
#   op was recorded straight from its entry; 2189 before is_conj was asked of
#   complex tensors only, which took strict from 1904 to 1889).
# - backward's ones_like seed as one cached launch (ops/factory.py): strict
#   1811 -> 1758, fused 2096 -> 2038 (compiled 938 -> 885: the step's backward
#   runs eagerly after a graph break).
# - signatures checked by matchers (see above): strict 1759 -> 1372, fused
#   2039 -> 1821; compiled 881 -> 593 (a graph's inputs checked against its
#   last call's signature instead of each passing _input_buffer).
# - a tensor passed twice matched too (AdamW's addcmul of the gradients with
#   themselves took the slow path): strict 1357 -> 1220, fused 1813 -> 1700.
# - compiled 595 -> 477 (issue 21, host overhead of the compiled step): the
#   graphs' outputs wrapped together (buffers.OutputTensors), rewritten inputs
#   swapped in directly after a matched call, the optimizer's step counts
#   bumped without FX's generic program (compile/step_counts.py).  (The
#   backward graph runs on autograd's thread and is not counted here; its
#   permuted inputs are matched now too: tests/test_signature_match.py.)
# - a matched foreach call's storages checked by its buffers' identities
#   (written_lists.matches) instead of each tensor's storage address: strict
#   1168 -> 1021, fused 1630 -> 1483; several outputs wrapped together
#   (OutputTensors): 1000, 1462; matchers of calls without lists as
#   straight-line code (signature_match._unrolled): 928, 1400 (in part only
#   because that code's calls went uncounted: see below).
# - the device guard in C++ (native/device_guard.cpp; PyTorch's Python-backed
#   guard called _Guard.type_ for every question, two per forward op with a
#   gradient): compiled 477 -> 461, strict 928 -> 911, fused 1400 -> 1383 (the
#   backward's ~500 guard calls a step were on autograd's thread, not counted).
# - a list signature's leaves checked in C++ (native/leaves.cpp: one call
#   instead of ~4 per leaf, AdamW's foreach ops): strict 911 -> 579, fused
#   1383 -> 1051; and a compiled graph's inputs (GraphMatcher): compiled
#   461 -> 361.  Then strict 579 -> 639 and fused 1051 -> 1102 with no change
#   of work: the matchers' straight-line code counted (see above).  Each
#   output tensor made in one C++ call (native/tensors.cpp): compiled 361 ->
#   337, strict 648 -> 591, fused 1102 -> 1054.  A predicted fused op
#   recorded in C++ (native/recorder.cpp; the compiled step's deferred graphs
#   are recorded too): compiled 337 -> 282, fused 1054 -> 700.  Matmul
#   dtype checks on a signature's first call only (guard per_signature):
#   strict 591 -> 579, fused 700 -> 688.  Outputs' storages registered and
#   accounted for in C++ (native/storages.cpp): compiled 242, strict 487,
#   fused 596; a multi-output op's or graph's too (OutputTensors): 226, 467,
#   576.  The fused prediction read inline: fused 561.  The cached path
#   entered in C++ (native/entry.cpp): strict 467 -> 411, fused 561 -> 493;
#   each matcher's checks made there (leaves.cpp's matcher_inputs): strict
#   351, fused 442; an in-place foreach call's distinct written storages
#   settled there, the guarded and masked kernels entered through it, softmax's
#   dim checked once per signature: strict 188, fused 275; an in-place op's
#   new buffers set on its storages there (Kernel._finish's in-place case):
#   strict 97, fused 184.  The optimizer's step counts through NumPy views,
#   the donation plan of a repeated signature found by identity: compiled
#   226 -> 203.  A strict launch noted in pending's queue in C++: strict
#   97 -> 52.  A foreach list of numbers packed into one array (AdamW's
#   two such calls: ops/list_numbers.py; 2 x 6 host-to-device transfers of
#   the numbers fewer, uncounted C++ work): strict 52 -> 58.
# About 2% headroom: the counts moved ~1.5% with test order, strict more (648
# run alone, 720-780 after the whole suite, when earlier tests' signatures
# crowded the matmul kernel's recent ones), until the test came to drop the
# kernels' recent signatures first.  The budgets count on the native helper
# (as CI builds it): without it views, guard calls, leaf checks and fused
# recording run in Python.
COMPILED_STEP_CALLS = 210
STRICT_STEP_CALLS = 60
FUSED_STEP_CALLS = 190
# Address allocations (each a lock) per compiled step of the model above: one
# range per graph call for all its outputs, and the eager backward seed's: 4
# (14 when each output took its own).
COMPILED_STEP_ALLOCATIONS = 4
# ones_like of a 0-d tensor (every backward's seed), cached: 20 strict and 33
# fused (73 and 86 as empty_like + fill_ through the dispatcher); 17 and 30
# with the output made in one C++ call; fused 15 once recorded in C++; 14 and
# 12 with the storage accounted for in C++ too.
STRICT_ONES_LIKE_CALLS = 15
FUSED_ONES_LIKE_CALLS = 13


def test_compiled_training_step_launches_two_executables():
    step = _training_step(compiled=True)
    for _ in range(3):
        step()
    with Launches() as launches:
        step()
    assert launches.count <= COMPILED_STEP_LAUNCHES, launches.count


def test_compiled_training_step_allocates_per_graph_not_per_output(monkeypatch):
    from torch_tpu.storage import buffers, memory
    step = _training_step(compiled=True)
    for _ in range(4):
        step()
    torch.tpu.synchronize()
    count = [0]
    # (the native helper allocates inside its output makers: counted here
    # through the Python ones, which take the same ranges)
    monkeypatch.setattr(buffers, "_own_new", None)
    monkeypatch.setattr(buffers, "_own_many", None)

    def counted(real):
        def allocate(*args):
            count[0] += 1
            return real(*args)
        return allocate
    monkeypatch.setattr(memory, "allocate", counted(memory.allocate))
    monkeypatch.setattr(buffers, "_allocate_range", counted(buffers._allocate_range))
    step()
    assert count[0] <= COMPILED_STEP_ALLOCATIONS, count[0]


def test_fused_training_step_launches_two_chains():
    step = _training_step(compiled=False)
    with torch.tpu.set_eager_mode("fused"):
        for _ in range(4):
            step()
        with Launches() as launches:
            step()
    assert launches.count <= FUSED_STEP_LAUNCHES, launches.count


@pytest.mark.parametrize("mode,budget", [("strict", STRICT_OP_CALLS), ("fused", FUSED_OP_CALLS)])
def test_python_calls_per_cached_elementwise_op(mode, budget):
    x, y = torch.randn(64, 64).to("tpu"), torch.randn(64, 64).to("tpu")
    results = []
    with torch.tpu.set_eager_mode(mode):
        for _ in range(3):  # build and cache the kernels (fused: and the chain, whose
            results.append(x * 1.0001 + y)  # second run makes the predicted ops' matchers)
            torch.tpu.synchronize()  # no launch queue pruning, no pending chain inside the count
        calls = calls_in_torch_tpu(lambda: results.append(x * 1.0001 + y)) / 2
        torch.tpu.synchronize()
    assert calls <= budget, f"{calls} calls per op in torch_tpu, budget {budget}"
    # (exact in strict mode; a fused chain's XLA executable may contract the
    # multiply and add into one fused multiply-add)
    exact = dict(rtol=0, atol=0) if mode == "strict" else {}
    torch.testing.assert_close(results[-1].cpu(), x.cpu() * 1.0001 + y.cpu(), **exact)


# A list argument holding views read at run-time offsets: Llama's
# rotate_half, torch.cat((-x[..., d:], x[..., :d]), -1), per layer and
# direction.  The native entry finds each list view's offset itself (its
# matcher's leaves laid out): 27 calls before (all of Kernel.__call__), 0 after.
LIST_OF_VIEWS_CALLS = 0
# In-place ops and copies into a strided view (x[:, ::2].add_(1); the
# backward of that cat, copying into half of each row): ATen's overlap check
# finds such a destination "too hard" and lets it pass; the native entry
# now does too (it sent them to Kernel.__call__): 30 and 40 calls before,
# 0 and 6 after (copy_'s own checks around the entry).
STRIDED_IN_PLACE_CALLS = 0
STRIDED_COPY_CALLS = 7


def test_python_calls_per_cached_cat_of_views():
    a = torch.randn(2, 4, 32, 8).to("tpu")
    x1, x2 = a[..., :4], a[..., 4:]
    for _ in range(3):
        torch.cat((-x2, x1), dim=-1)
    calls = calls_in_torch_tpu(lambda: torch.cat((-x2, x1), dim=-1))
    assert calls <= LIST_OF_VIEWS_CALLS, f"{calls} calls per cat of views, budget {LIST_OF_VIEWS_CALLS}"
    c = a.cpu()
    assert torch.equal(torch.cat((-x2, x1), dim=-1).cpu(), torch.cat((-c[..., 4:], c[..., :4]), dim=-1))


def test_python_calls_per_cached_write_into_a_strided_view():
    x = torch.zeros(4, 6).to("tpu")
    dst = torch.zeros(2, 2, 32, 16).to("tpu")
    src = torch.randn(2, 32, 2, 8).to("tpu").transpose(1, 2)
    every_other, right_half = x[:, ::2], dst[..., 8:]
    for _ in range(3):
        every_other.add_(1)
        right_half.copy_(src)
    calls = calls_in_torch_tpu(lambda: every_other.add_(1))
    assert calls <= STRIDED_IN_PLACE_CALLS, f"{calls} calls per add_ into a strided view"
    calls = calls_in_torch_tpu(lambda: right_half.copy_(src))
    assert calls <= STRIDED_COPY_CALLS, f"{calls} calls per copy into a strided view"
    want = torch.zeros(4, 6)
    want[:, ::2] = 4
    assert torch.equal(x.cpu(), want)
    assert torch.equal(dst.cpu()[..., 8:], src.cpu()) and not dst.cpu()[..., :8].any()
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.zeros(4, 1).to("tpu").expand(4, 3).add_(1)  # (an expanded one still refused)


# A kernel called with keywords (a kwarg-only argument given: HF's SDPA
# scale=, gelu(approximate="tanh"), sum(dtype=)) is matched like a positional
# call, its keywords' values as leaves under their names, in C++: gelu 31
# calls before (Kernel.__call__ built the signature every call), 0 after;
# sum(1, dtype=) 43 -> 0.
KEYWORD_CALLS = 0


@pytest.mark.parametrize("op", ["gelu", "sum"])
def test_python_calls_per_cached_call_with_keywords(op):
    x = torch.randn(64, 64).to("tpu")
    f = {"gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
         "sum": lambda t: t.sum(1, dtype=torch.float64)}[op]
    for _ in range(3):
        f(x)
    calls = calls_in_torch_tpu(lambda: f(x))
    assert calls <= KEYWORD_CALLS, f"{calls} calls per {op} with keywords, budget {KEYWORD_CALLS}"
    got, want = f(x).cpu(), f(x.cpu())
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)


# A random kernel (dropout in training: GPT-2 and BERT apply it 3 times a
# layer) is matched by its native entry in strict mode, which then asks
# Python only for its random words (registry._draw_words): 47 calls before,
# 21 after (the words' draw and launch, and native_dropout's two outputs).
DROPOUT_CALLS = 22


def test_python_calls_per_cached_dropout_and_its_stream():
    x = torch.randn(64, 64).to("tpu")

    def drop():
        return torch.nn.functional.dropout(x, 0.25, training=True)
    for _ in range(3):
        drop()
    calls = calls_in_torch_tpu(drop)
    assert calls <= DROPOUT_CALLS, f"{calls} calls per dropout, budget {DROPOUT_CALLS}"
    # the entry draws as the Kernel does: one stream, each call its own mask
    torch.manual_seed(7)
    native = [drop().cpu() for _ in range(3)]
    torch.manual_seed(7)
    with torch.tpu.set_eager_mode("debug"):  # (Kernel.__call__ itself)
        kernel = [drop().cpu() for _ in range(3)]
    for a, b in zip(native, kernel):
        assert torch.equal(a, b)
    assert not torch.equal(native[0], native[1])


# In-place TensorIterator ops (x.add_(y), x.relu_(), copy_) on their cached
# path, and copies into and out of a view of a large buffer (DDP's gradient
# buckets, a KV cache): the native entry checks the destination's overlap
# itself.  Strict / fused: in-place op 30 / 29 before (all of Kernel.__call__
# for its overlap check), 0 / 0 after; a copy from a view 42 / 41 -> 6 / 6
# (copy_'s own checks around the entry); a copy into a view of a buffer large
# enough to donate 53 -> 10 strict (access.can_donate asked from C++; fused
# mode never donates and keeps Kernel.__call__: 43 -> 41).
IN_PLACE_CALLS = 1
COPY_FROM_VIEW_CALLS = 7
COPY_INTO_VIEW_CALLS = {"strict": 12, "fused": 44}


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_python_calls_per_cached_in_place_op_and_view_copy(mode):
    n = access.DONATE_BYTES // 4 * 2  # float32 elements of a buffer large enough to donate into
    x, y, g = (torch.randn(64, 64).to("tpu") for _ in range(3))
    flat = torch.zeros(n, device="tpu") * 1  # its own buffer (a computed one)
    cpu_x, cpu_flat, cpu_g = x.cpu(), flat.cpu(), g.cpu()
    steps = [lambda x, flat, g: x.add_(y if x.device.type == "tpu" else y.cpu()),
             lambda x, flat, g: flat[4096:8192].view(64, 64).copy_(g),
             lambda x, flat, g: g.copy_(flat[100:4196].view(64, 64))]
    with torch.tpu.set_eager_mode(mode):
        for _ in range(3):
            for step in steps:
                step(x, flat, g)
            torch.tpu.synchronize()
        donations = access.donations
        calls = [calls_in_torch_tpu(lambda: step(x, flat, g)) for step in steps]
        torch.tpu.synchronize()
    assert calls[0] <= IN_PLACE_CALLS, f"{calls[0]} calls per x.add_(y), budget {IN_PLACE_CALLS}"
    assert calls[1] <= COPY_INTO_VIEW_CALLS[mode], f"{calls[1]} calls per copy into a view"
    assert calls[2] <= COPY_FROM_VIEW_CALLS, f"{calls[2]} calls per copy from a view"
    assert access.donations - donations == (1 if mode == "strict" else 0)
    for _ in range(4):
        for step in steps:
            step(cpu_x, cpu_flat, cpu_g)
    for tpu, cpu in ((x, cpu_x), (flat, cpu_flat), (g, cpu_g)):
        torch.testing.assert_close(tpu.cpu(), cpu, rtol=0, atol=0)


# An out= call with a cached signature (DDP's reducer copies each gradient
# into its bucket as mul.out(grad, 1 / world, out=bucket_view), a backward
# op per parameter per step): first its signature built inline as a
# positional call's is (Kernel._fast_key), not argument by argument: mul.out
# into a view 72 -> 68 calls, add.out into a whole tensor 85 -> 78; then the
# call cached with out as a leaf, its program writing out's buffer, entered
# in C++ as an in-place op is (Kernel._written_out): 4 and 0 (the 4: whether
# the view's large buffer may be donated, as for x[a:b].copy_(y)).
OUT_INTO_VIEW_CALLS = 4
OUT_WHOLE_CALLS = 0


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_python_calls_per_cached_out_call(mode):
    bucket = torch.zeros(64 + 2 * 96, device="tpu")
    g = torch.randn(8, 12).to("tpu")
    view, whole = bucket[64:64 + 96].view(8, 12), torch.empty(8, 12, device="tpu")
    calls = []
    with torch.tpu.set_eager_mode(mode):
        for _ in range(3):  # (fused: the same ops recorded in the same order, so predicted)
            torch.mul(g, 0.5, out=view)
            torch.add(g, g, out=whole)
            torch.tpu.synchronize()
        calls.append(calls_in_torch_tpu(lambda: torch.mul(g, 0.5, out=view)))
        calls.append(calls_in_torch_tpu(lambda: torch.add(g, g, out=whole)))
        torch.tpu.synchronize()
    assert calls[0] <= OUT_INTO_VIEW_CALLS, f"{calls[0]} calls per mul.out into a view, budget {OUT_INTO_VIEW_CALLS}"
    assert calls[1] <= OUT_WHOLE_CALLS, f"{calls[1]} calls per add.out, budget {OUT_WHOLE_CALLS}"
    cpu_g = g.cpu()
    assert torch.equal(view.cpu(), cpu_g * 0.5) and torch.equal(whole.cpu(), cpu_g + cpu_g)
    assert not bucket[:64].cpu().any() and not bucket[64 + 96:].cpu().any()


# x.clone() as one cached launch (ops/shape.py): 41 calls before (PyTorch's
# composite: empty_strided's checks and allocation, then copy_), 4 after
# (the raw clone's frame and its host-values check around the entry).  A
# contiguous tensor's cast, x.to(torch.bfloat16) (ops/core.py: the cast
# kernel, its keywords matched by its native entry): 42 before (_to_copy's
# keyword path built its signature every call), 5 after (_to_copy's checks).
CLONE_CALLS = 5
CAST_CALLS = 7
# x.transpose(1, 2).contiguous(), clone(memory_format=torch.contiguous_format)
# as HF attention calls it per layer: 32 before (PyTorch's composite), 5 after
# (the same raw clone, its memory_format matched by the native entry)
CONTIGUOUS_CALLS = 5


@pytest.mark.parametrize("op,budget", [("clone", CLONE_CALLS), ("contiguous", CONTIGUOUS_CALLS),
                                       ("cast", CAST_CALLS)])
def test_python_calls_per_cached_clone_and_cast(op, budget):
    x = torch.randn(8, 16, 32).to("tpu")
    if op in ("clone", "contiguous"):
        x = x.transpose(1, 2)  # a permuted layout, which clone keeps and contiguous() does not
        make = x.clone if op == "clone" else x.contiguous
    else:
        def make():
            return x.to(torch.bfloat16)
    for _ in range(3):
        make()
    calls = calls_in_torch_tpu(make)
    assert calls <= budget, f"{calls} calls per {op}, budget {budget}"
    expected = {"clone": x.cpu().clone, "contiguous": x.cpu().contiguous,
                "cast": lambda: x.cpu().to(torch.bfloat16)}[op]()
    y = make()
    assert y.stride() == expected.stride() and y.dtype == expected.dtype and torch.equal(y.cpu(), expected)
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


@pytest.mark.parametrize("mode,budget", [("strict", STRICT_ONES_LIKE_CALLS), ("fused", FUSED_ONES_LIKE_CALLS)])
def test_python_calls_per_cached_ones_like(mode, budget):
    loss = torch.tensor(2.5).to("tpu")
    results = []
    with torch.tpu.set_eager_mode(mode):
        for _ in range(3):  # the first call takes PyTorch's path, then the cached one
            results.append(torch.ones_like(loss))
        torch.tpu.synchronize()
        calls = calls_in_torch_tpu(lambda: results.append(torch.ones_like(loss)))
        torch.tpu.synchronize()
    assert calls <= budget, f"{calls} calls per ones_like in torch_tpu, budget {budget}"
    for r in results:
        assert r.shape == () and r.dtype == torch.float32 and not r.requires_grad
        assert r.cpu().item() == 1.0
    assert len({r.untyped_storage().data_ptr() for r in results}) == len(results)  # no shared storage


# torch_tpu's own calls per cached step of torch.optim.AdamW(fused=True) (the
# Hugging Face Trainer's default), per parameter: its lists read in one C++
# pass (ops/tensor_lists.py), so what grows with the parameters is one C call
# per written tensor (its storage, to take its new buffer): 3 a parameter
# (94 through access.read and access.write, which also launched a reshape of
# each bias gradient's (1, n) buffer).
FUSED_ADAMW_CALLS_PER_PARAMETER = 3


def test_python_calls_per_fused_adamw_step_grow_only_by_its_writes():
    def step_calls(layers):
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(layers)]).to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        model(torch.randn(2, 8).to("tpu")).sum().backward()
        for _ in range(2):
            opt.step()
        return calls_in_torch_tpu(opt.step), 2 * layers
    (few, n_few), (many, n_many) = step_calls(2), step_calls(6)
    assert (many - few) / (n_many - n_few) <= FUSED_ADAMW_CALLS_PER_PARAMETER, (few, many)


@pytest.mark.parametrize("mode,budget", [("compiled", COMPILED_STEP_CALLS), ("strict", STRICT_STEP_CALLS),
                                         ("fused", FUSED_STEP_CALLS)])
def test_python_calls_per_training_step(mode, budget):
    # Strict mode checks a call first against its kernel's recent signatures,
    # then against those of its arguments' shapes: signatures earlier tests
    # left there would make the count depend on which tests ran before (648
    # alone, 720-780 after the whole suite, by xdist's order).  The step's own
    # signatures only (the cached executables stay).
    for kernel in registry.KERNELS.values():
        if isinstance(kernel, registry.Kernel):
            kernel.cache.recent, kernel.cache.by_shape = [], {}
    step = _training_step(compiled=mode == "compiled")
    with torch.tpu.set_eager_mode("fused" if mode == "fused" else "strict"):
        for _ in range(4):
            step()
        torch.tpu.synchronize()
        calls = calls_in_torch_tpu(step)
    assert calls <= budget, f"{calls} calls per {mode} step in torch_tpu, budget {budget}"


# torch.empty's checks remembered per geometry, and its tensor made as a kernel
# output is (48 before; 29, then 26 with the output made in one C++ call, 18
# with its storage accounted for there too);
# torch.arange of plain numbers a remembered constant
# (143 before: a launch with host-copied ends, then resize_ and a write; 71
# before the storages were accounted for in C++, 58 after; 12 with a ramp
# seen before wrapped straight from its constant, not PyTorch's composite of
# empty and arange.out; 14 with the default dtype in its key, as a float
# ramp's dtype follows it, and the wrapping shared with scalar_tensor)
# torch.scalar_tensor (a number as a 0-d tensor: torch.where(mask, x, 0.0),
# x[i] = v) wrapped from the array of its first call: 48 before (PyTorch's
# empty + fill_ and a launch), 8 after
EMPTY_CALLS = 20
ARANGE_CALLS = 14
SCALAR_TENSOR_CALLS = 8


@pytest.mark.parametrize("make,budget", [(lambda: torch.empty(32, device="tpu"), EMPTY_CALLS),
                                         (lambda: torch.arange(16, device="tpu"), ARANGE_CALLS),
                                         (lambda: torch.scalar_tensor(0.0, device="tpu"), SCALAR_TENSOR_CALLS)],
                         ids=["empty", "arange", "scalar_tensor"])
def test_python_calls_per_cached_factory(make, budget):
    for _ in range(3):
        make()
    calls = calls_in_torch_tpu(make)
    assert calls <= budget, f"{calls} calls in torch_tpu, budget {budget}"


def test_overhead_benchmark_counts_host_threads_apart():
    # the benchmark's host clock covers this thread and autograd's tpu thread;
    # a backward's work on autograd's thread shows in it
    sys.path.insert(0, os.path.join(os.path.dirname(PACKAGE), "benchmarks"))
    try:
        import overhead
    finally:
        sys.path.pop(0)
    clock = overhead.HostClock()
    assert len(clock.clocks) == 2  # (tpu backward runs on a thread of its own)
    results = overhead.run(rounds=1, chain_calls=1, steps=1, warmup=1,
                           chain_variants=["cpu-eager", "tpu-fused"], step_variants=[], optimizer_variants=[],
                           copy_variants=["cpu-eager", "tpu-strict"])
    # (no comparison of the clocks: read one after another around a single
    # call, the threads' sum once came out 6% above the process's total)
    for cpu, wall, host in [*results["chain"].values(), *results["copy"].values()]:
        assert cpu > 0 and host > 0 and wall > 0
    assert [r[:2] for r in overhead.rows(results)] == [["chain (µs/op)", "cpu-eager"], ["chain (µs/op)", "tpu-fused"],
                                                      ["copy (µs/copy)", "cpu-eager"], ["copy (µs/copy)", "tpu-strict"]]
    # ratios pair each round's runs (the machine's speed drifts between rounds)
    ratios = results["ratios"]["chain"]
    assert ratios["cpu-eager"] == (1.0, 1.0) and all(r > 0 for r in ratios["tpu-fused"])
    assert [r[4] for r in overhead.rows(results)][0] == "1.0x"


def test_platform_query_scans_the_path_once_per_module(monkeypatch):
    # torch.accelerator.is_available() reaches runtime.platform_installed()
    # until the device starts, and PyTorch's optimizers ask it every step, in
    # any process that imports torch (the backend autoloads): no sys.path scan each time
    import importlib.util

    from torch_tpu import runtime
    scans = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: scans.append(name) or real(name, *a))
    for platform in ("", "gpu", "tpu", "cpu"):
        monkeypatch.setenv("TORCH_TPU_PLATFORM", platform)
        runtime.platform_installed()
    before = len(scans)
    for platform in ("", "gpu", "tpu", "cpu") * 10:
        monkeypatch.setenv("TORCH_TPU_PLATFORM", platform)
        runtime.platform_name(), runtime.platform_installed()
    assert len(scans) == before, scans[before:]
    assert len(scans) == len(set(scans))  # each module looked up at most once in the process


def test_import_torch_leaves_dynamo_unimported():
    # every ``import torch`` imports torch_tpu (the backend autoloads): Dynamo,
    # AOTAutograd and sympy (~1.4 s, ~90 MB here) wait until torch.compile, or
    # torch.tpu.ops / torch.tpu.optimizers / torch.tpu.lowering_check, first need them
    import subprocess
    code = ("import sys, torch\n"
            "heavy = [m for m in ('torch._dynamo', 'torch._functorch.aot_autograd', 'sympy') if m in sys.modules]\n"
            "print('before', heavy)\n"
            "import torch.tpu.ops, torch.tpu.optimizers\n"
            "from torch.tpu.ops import ragged_dot\n"
            "assert torch.tpu.ops.ragged_dot is ragged_dot and torch.tpu.optimizers.AdamW\n"
            "assert callable(torch.tpu.lowering_check)\n"
            "import torch_tpu\n"
            "assert torch_tpu.optimizers.AdamW is torch.tpu.optimizers.AdamW and torch_tpu.tpu_ops.ragged_dot\n"
            "from torch._dynamo.backends.registry import _COMPILER_FNS\n"
            "print('registered', 'tpu' in _COMPILER_FNS)\n"
            "print(torch.compile(lambda x: x * 2, backend='tpu')(torch.ones(2, device='tpu')).tolist())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:3] == ["before []", "registered True", "[2.0, 2.0]"], out.stdout


# A small CPU tensor's .to("tpu"), or torch.tensor(..., device="tpu"): 194
# Python calls before (~130 us), 130 of them jax.device_put's own layers; 47
# after (storage/transfer.py calls JAX's batched put directly).  Counted in
# every package, as the cost was JAX's Python.
HOST_TO_DEVICE_CALLS = 60


@pytest.mark.parametrize("source", ["to", "tensor"])
def test_python_calls_per_host_to_device_copy(source):
    x = torch.randn(4, 4)
    make = (lambda: x.to("tpu")) if source == "to" else (lambda: torch.tensor([[1.5, 2.0]], device="tpu"))
    for _ in range(3):
        make()
    calls = calls_in_torch_tpu(make, prefix="")
    assert calls <= HOST_TO_DEVICE_CALLS, f"{calls} calls per host-to-device copy, budget {HOST_TO_DEVICE_CALLS}"
    expected = x if source == "to" else torch.tensor([[1.5, 2.0]])
    assert torch.equal(make().cpu(), expected)


# The gradient of a slice or a select: PyTorch's composite is a zeros and a
# copy into its slice (2 launches, 20 Python calls on autograd's thread);
# ops/shape.py pads it into place in one cached launch.
SLICE_BACKWARD_CALLS = 0


@pytest.mark.parametrize("op", ["slice", "select"])
def test_python_calls_per_cached_slice_gradient(op):
    grad = torch.randn(4, 2, 3).to("tpu")
    if op == "slice":
        def backward():
            return torch.ops.aten.slice_backward(grad, [4, 7, 3], 1, 1, 5, 2)
        expected = torch.zeros(4, 7, 3)
        expected[:, 1:5:2] = grad.cpu()
    else:
        def backward():
            return torch.ops.aten.select_backward(grad[:, 0], [4, 5, 3], 1, -2)
        expected = torch.zeros(4, 5, 3)
        expected[:, -2] = grad.cpu()[:, 0]
    for _ in range(3):
        backward()
    calls = calls_in_torch_tpu(backward)
    assert calls <= SLICE_BACKWARD_CALLS, f"{calls} calls per {op}_backward, budget {SLICE_BACKWARD_CALLS}"
    assert torch.equal(backward().cpu(), expected)


# A small tpu tensor's .cpu(): 51 Python calls before (~38 us: the whole
# buffer cut on the host through NumPy's as_strided, copied twice, reshaped and
# cast to its own dtype), 39 after (~22 us: a whole row-major buffer is read as
# it is, copied once by torch.tensor).  Counted in every package (NumPy's).
DEVICE_TO_HOST_CALLS = 42


def test_python_calls_per_device_to_host_copy():
    x = torch.randn(2, 16)
    t = x.to("tpu")
    for _ in range(3):
        t.cpu()
    calls = calls_in_torch_tpu(t.cpu, prefix="")
    assert calls <= DEVICE_TO_HOST_CALLS, f"{calls} calls per .cpu(), budget {DEVICE_TO_HOST_CALLS}"
    back = t.cpu()
    assert torch.equal(back, x) and back.is_contiguous()
    back.resize_(64)  # a new CPU tensor of its own, resizable as PyTorch's copies are


def test_host_values_copied_into_a_whole_tensor_take_one_transfer(monkeypatch):
    # dst.copy_(cpu_src) of dst's shape and dtype (load_state_dict from a CPU
    # checkpoint, a staging buffer filled each step): the transfer becomes the
    # storage's buffer (~34 us), where the copy kernel's jitted write through
    # dst took ~54 us
    kernels = []
    original = registry.Kernel.__call__

    def spy(self, *args, **kwargs):
        kernels.append(self)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(registry.Kernel, "__call__", spy)
    dst, src = torch.empty(4, 4, device="tpu"), torch.randn(4, 4)
    alias = dst.view(16)
    for _ in range(2):
        dst.copy_(src)
    assert kernels == []
    assert torch.equal(dst.cpu(), src) and torch.equal(alias.cpu(), src.view(16))
    dst[1:3].copy_(src[:2] * 2)  # part of the storage: written through the view, as before
    expected = src.clone()
    expected[1:3] = src[:2] * 2
    assert torch.equal(dst.cpu(), expected)
