"""``model.generate()`` on tpu with Transformers' defaults: shape-stable
decoding (torch_tpu/hf/generation.py).  Guarded by counts of XLA executables
built (torch_tpu.profiler.xla_compiles), never by timers; outputs are
compared with PyTorch on the CPU."""
import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu.hf import generation  # noqa: E402
from torch_tpu.ops import buckets  # noqa: E402

transformers = pytest.importorskip("transformers")

# A cold generate() builds the cache, the compiled step and a few small
# kernels around it: a constant, whatever the number of tokens.
COLD_COMPILES_MAX = 16


def _llama(vocab=256, hidden=64):
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(config).eval()
    return cpu, copy.deepcopy(cpu).to("tpu")


def _prompt(batch, length, seed, vocab=256):
    return torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _generate(model, ids, **kwargs):
    """generate() on tpu and the XLA executables it built (kernels run
    asynchronously: waiting for the device keeps each count in its call)."""
    torch.tpu.synchronize()
    before = torch_tpu.profiler.xla_compiles()
    out = model.generate(ids, **kwargs)
    torch.tpu.synchronize()
    return out, torch_tpu.profiler.xla_compiles() - before


@pytest.fixture(scope="module")
def llama():
    return _llama()


def test_defaults_are_installed_on_transformers():
    from transformers.generation.utils import GenerationMixin
    assert getattr(GenerationMixin.generate, "_torch_tpu_shape_stable", False)


def test_cache_bucket():
    assert [generation.cache_bucket(n) for n in (1, 40, 128, 129, 300)] == [128, 128, 128, 256, 512]


def test_warm_generate_compiles_nothing_and_matches_cpu(llama):
    cpu, tpu = llama
    ids = _prompt(1, 8, seed=1)
    out, cold = _generate(tpu, ids.to("tpu"), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert out.device.type == "tpu"
    assert torch.equal(out.cpu(), cpu.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False))
    assert 0 < cold <= COLD_COMPILES_MAX
    # Transformers' prefill computes with the cache's length, a tpu scalar: like
    # any small op on a shape new to the process, each runs on its size
    # bucket's program for its first BUCKET_CALLS calls, then gets its own
    # (ops/buckets.py), once per process: warmed past that here, so that the
    # count does not depend on which tests ran before
    for _ in range(buckets.BUCKET_CALLS):
        _generate(tpu, ids.to("tpu"), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    # a new max_new_tokens and a new prompt length, in the same cache bucket
    for length, new in ((8, 24), (13, 40), (3, 5)):
        ids = _prompt(1, length, seed=length)
        out, warm = _generate(tpu, ids.to("tpu"), max_new_tokens=new, min_new_tokens=new, do_sample=False)
        assert warm == 0, f"prompt {length}, {new} new tokens: {warm} new XLA executables"
        assert torch.equal(out.cpu(), cpu.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False))


def test_cold_compiles_do_not_grow_with_tokens():
    # fresh models (new weight shapes, so their compiled step is new): the
    # first also builds the small kernels the others then share, so the
    # 2-token and 40-token calls are compared after it
    counts = []
    for vocab, new in ((96, 2), (104, 2), (112, 40)):
        cpu, tpu = _llama(vocab=vocab, hidden=32)
        ids = _prompt(1, 6, seed=vocab, vocab=vocab)
        out, cold = _generate(tpu, ids.to("tpu"), max_new_tokens=new, min_new_tokens=new, do_sample=False)
        assert torch.equal(out.cpu(), cpu.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False))
        counts.append(cold)
    assert max(counts) <= COLD_COMPILES_MAX
    assert counts[1] == counts[2] > 0, counts


def test_padded_batch_sampling_matches_cpu_with_seed(llama):
    cpu, tpu = llama
    ids = _prompt(4, 9, seed=7)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    mask[3, :5] = 0
    ids[mask == 0] = 0
    kwargs = dict(max_new_tokens=12, do_sample=True, top_k=20, temperature=1.5)
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        out, _ = _generate(tpu, ids.to("tpu"), attention_mask=mask.to("tpu"), **kwargs)
        runs.append(out.cpu())
    torch.manual_seed(5)
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(runs[0], cpu.generate(ids, attention_mask=mask, **kwargs))
    # greedy on the same padded batch, warm: no new executables (the first
    # greedy call may build some: an op of the greedy path only, on a new
    # small shape, runs on its bucket's program twice, then gets its own)
    _generate(tpu, ids.to("tpu"), attention_mask=mask.to("tpu"), max_new_tokens=20, do_sample=False)
    out, warm = _generate(tpu, ids.to("tpu"), attention_mask=mask.to("tpu"), max_new_tokens=20, do_sample=False)
    assert warm == 0
    assert torch.equal(out.cpu(), cpu.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False))


def test_explicit_choices_are_left_to_transformers(llama):
    _, tpu = llama
    ids = _prompt(1, 4, seed=3).to("tpu")
    assert generation._applies(tpu, ids, None, {})
    assert not generation._applies(tpu, ids, None, {"cache_implementation": "dynamic"})
    assert not generation._applies(tpu, ids, None, {"num_beams": 2})
    assert not generation._applies(tpu, ids, None, {"disable_compile": True})
    assert not generation._applies(tpu, ids, transformers.GenerationConfig(cache_implementation="static"), {})
    assert not generation._applies(tpu, ids.float(), None, {})
    cpu_model, _ = _llama(vocab=64, hidden=32)
    assert not generation._applies(cpu_model, ids.cpu(), None, {})


def test_defaults_can_be_turned_off(llama, monkeypatch):
    _, tpu = llama
    monkeypatch.setenv("TORCH_TPU_GENERATE_DEFAULTS", "0")
    assert not generation._applies(tpu, _prompt(1, 4, seed=3).to("tpu"), None, {})


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fused", "debug"])
def test_other_eager_modes_warm_generate_compiles_nothing(mode):
    # In fused mode the second call compiles one small chain: the reset of the
    # static cache the first call built (six fills, read with the prefill's
    # length), which the first call did not run.  Every later call is warm.
    cpu, tpu = _llama(vocab=80, hidden=32)
    with torch.tpu.set_eager_mode(mode):
        for length, new in ((8, 16), (5, 8), (11, 32)):
            ids = _prompt(2, length, seed=length, vocab=80)
            out, compiles = _generate(tpu, ids.to("tpu"), max_new_tokens=new, min_new_tokens=new, do_sample=False)
            assert torch.equal(out.cpu(), cpu.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False))
        assert compiles == 0


@pytest.mark.slow
def test_sampling_matches_tpu_eager_reference(llama):
    # the reference: Transformers' own path on tpu (dynamic cache, eager
    # model, no compile), with the loop on the host as in the default path
    _, tpu = llama
    ids = _prompt(2, 6, seed=11)
    kwargs = dict(max_new_tokens=6, do_sample=True, top_p=0.9)
    torch.manual_seed(3)
    reference = tpu.generate(ids, disable_compile=True, **kwargs)
    torch.manual_seed(3)
    assert torch.equal(tpu.generate(ids.to("tpu"), **kwargs).cpu(), reference)


@pytest.mark.slow
def test_defaults_installed_when_transformers_is_imported_first():
    import subprocess
    import sys
    code = ("import transformers.generation.utils as g, torch_tpu; "
            "print(getattr(g.GenerationMixin.generate, '_torch_tpu_shape_stable', False))")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.slow
def test_defaults_installed_when_transformers_imports_torch():
    # the import Transformers recommends for custom models: its module body
    # imports torch, whose autoload imports torch_tpu while the generation
    # module is half-built (this used to fail the import)
    import subprocess
    import sys
    code = ("from transformers.generation import GenerationMixin; from transformers import LlamaConfig; "
            "print(getattr(GenerationMixin.generate, '_torch_tpu_shape_stable', False))")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True"
