"""Text generation: Hugging Face ``model.generate()`` with its defaults, on
tpu (each eager mode) against PyTorch CPU eager.

Each variant runs in a fresh process (so "cold" is a first call, with JAX's
on-disk cache off unless --disk-cache): a cold call (prompt 8, 32 new
tokens), then warm calls with a new prompt length and a new max_new_tokens
in the same cache bucket (prompt 11, 48 new tokens; best of --repeat).
Reported: wall and CPU seconds (all threads, ``time.process_time``) per
call and per token, tokens/s, and XLA executables built per call
(``torch_tpu.profiler.xla_compiles``).  Greedy and batch 1 unless told.

    python benchmarks/generate.py [--configs tiny llama-100m] [--variants ...]
                                  [--batch 4] [--sample] [--repeat 3]

Variants: cpu-eager, tpu-strict, tpu-fused, tpu-debug, and tpu-strict-dynamic
(``TORCH_TPU_GENERATE_DEFAULTS=0``: Transformers' DynamicCache as before,
slow; opt in).  Configs: tiny (2 layers, hidden 64) and llama-100m (12
layers, hidden 768, vocab 32000, tied: ~100M parameters; opt in, minutes).
"""
import argparse
import json
import os
import subprocess
import sys
import time

CONFIGS = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 vocab_size=256, intermediate_size=128),
    "llama-100m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                       vocab_size=32000, intermediate_size=2048, tie_word_embeddings=True),
}
VARIANTS = ["cpu-eager", "tpu-strict", "tpu-fused"]
COLD = (8, 32)   # prompt length, new tokens
WARM = (11, 48)


def _one(config_name, variant, batch, sample, repeat, threads):
    """Measure one variant in this process; returns a dict."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    import transformers

    import torch_tpu
    if threads:
        torch.set_num_threads(threads)
    config = transformers.LlamaConfig(max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
                                      pad_token_id=0, **CONFIGS[config_name])
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    device = "cpu"
    if variant.startswith("tpu"):
        torch.tpu.set_eager_mode(variant.split("-")[1])
        model.to("tpu")
        device = "tpu"
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    gen = torch.Generator().manual_seed(1)

    def call(length, new):
        ids = torch.randint(3, config.vocab_size, (batch, length), generator=gen).to(device)
        sync()
        compiles = torch_tpu.profiler.xla_compiles()
        torch.manual_seed(0)
        wall, cpu = time.perf_counter(), time.process_time()
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=sample,
                             **({"top_k": 50} if sample else {})).cpu()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        sync()
        assert out.shape == (batch, length + new)
        return {"wall": wall, "cpu": cpu, "compiles": torch_tpu.profiler.xla_compiles() - compiles,
                "tokens": new}

    cold = call(*COLD)
    warm = [call(*WARM) for _ in range(repeat)]
    best = min(warm, key=lambda r: r["cpu"])
    best["compiles"] = max(r["compiles"] for r in warm)
    return {"config": config_name, "variant": variant, "batch": batch, "sample": sample,
            "params": sum(p.numel() for p in model.parameters()), "cold": cold, "warm": best,
            "threads": torch.get_num_threads()}


def run(config_name, variant, batch=1, sample=False, repeat=3, disk_cache=False, threads=1, timeout=1800):
    """One variant in a fresh process: its result dict, or {"error": ...}."""
    env = dict(os.environ)
    if variant.endswith("-dynamic"):
        env["TORCH_TPU_GENERATE_DEFAULTS"] = "0"
        variant = variant[:-len("-dynamic")]
    if not disk_cache:
        env["TORCH_TPU_CACHE_DIR"] = ""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", config_name, variant,
           "--batch", str(batch), "--repeat", str(repeat), "--threads", str(threads)] + (["--sample"] if sample else [])
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    result = json.loads(lines[-1])
    if env.get("TORCH_TPU_GENERATE_DEFAULTS") == "0":
        result["variant"] += "-dynamic"
    return result


def describe(batch, sample, threads):
    return (f"generate(): batch {batch}, {'sampling' if sample else 'greedy'}, torch threads {threads or 'default'}; "
            f"cold = prompt {COLD[0]} + {COLD[1]} new tokens, the first call in a fresh process; "
            f"warm = prompt {WARM[0]} + {WARM[1]} new tokens, a later call")


def rows(results):
    """Table rows; per-token ratios are against cpu-eager of the same config."""
    base = {r["config"]: r["warm"]["cpu"] / r["warm"]["tokens"] for r in results
            if r.get("variant") == "cpu-eager"}
    out = []
    for r in results:
        if "error" in r:
            out.append([r.get("config", "?"), r.get("variant", "?"), "failed: " + r["error"]] + ["-"] * 7)
            continue
        c, w = r["cold"], r["warm"]
        per_token = w["cpu"] / w["tokens"]
        ratio = per_token / base[r["config"]] if r["config"] in base else None
        out.append([r["config"], r["variant"], f"{c['wall']:.2f}", f"{c['cpu']:.2f}", str(c["compiles"]),
                    f"{w['wall'] / w['tokens'] * 1000:.1f}", f"{per_token * 1000:.1f}",
                    f"{w['tokens'] * r['batch'] / w['wall']:.0f}", str(w["compiles"]),
                    f"{ratio:.2f}x" if ratio else "-"])
    return out


HEADERS = ["config", "variant", "cold call s (wall)", "cold call s (CPU)", "cold XLA compiles",
           "warm ms/token (wall)", "warm ms/token (CPU)", "warm tokens/s (wall)", "warm XLA compiles",
           "warm CPU per token vs CPU eager"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["tiny"], choices=list(CONFIGS))
    parser.add_argument("--variants", nargs="+", default=VARIANTS)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--sample", action="store_true", help="do_sample=True, top_k=50 (default greedy)")
    parser.add_argument("--repeat", type=int, default=3, help="warm calls (the best is reported)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: a tiny model gains nothing from more; 0: torch's default)")
    parser.add_argument("--disk-cache", action="store_true", help="keep JAX's on-disk compilation cache on")
    parser.add_argument("--one", nargs=2, metavar=("CONFIG", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(*args.one, args.batch, args.sample, args.repeat, args.threads)))
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import table
    results = [run(c, v, args.batch, args.sample, args.repeat, args.disk_cache, args.threads)
               for c in args.configs for v in args.variants]
    print(describe(args.batch, args.sample, args.threads))
    print(table(rows(results), HEADERS))


if __name__ == "__main__":
    main()
