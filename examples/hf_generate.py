"""Text generation with Hugging Face Transformers on tpu, with its defaults.

Builds a tiny random model from a config (nothing is downloaded), saves it,
loads it back with ``device_map="tpu"`` and calls ``generate()`` as on any
device.  On tpu the defaults are shape-stable (docs/huggingface.md): the
first call compiles the decoding step once, and later calls with another
prompt length or ``max_new_tokens`` (same cache bucket) compile nothing.

    python examples/hf_generate.py [--arch llama|qwen2|mistral|gpt2] [--new-tokens 32]
"""
import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

import torch_tpu  # noqa: E402  (registers the device; torch's autoload does too)


def tiny_config(arch):
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if arch == "gpt2":
        return transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=512,
                                       bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
            "mistral": transformers.MistralConfig}[arch](**common)


def timed_generate(model, prompt, **kwargs):
    torch.tpu.synchronize()
    compiles, start = torch_tpu.profiler.xla_compiles(), time.perf_counter()
    out = model.generate(prompt, **kwargs).cpu()
    return out, time.perf_counter() - start, torch_tpu.profiler.xla_compiles() - compiles


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama", choices=["llama", "qwen2", "mistral", "gpt2"])
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(tiny_config(args.arch)).save_pretrained(folder)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, device_map="tpu", dtype=torch.float32)
    print("model on", model.device)

    n = args.new_tokens
    runs = [("greedy, first call", [1, 17, 42, 99, 5, 64, 7, 8], dict(do_sample=False, max_new_tokens=n)),
            ("greedy, new lengths", [1, 17, 42, 99, 5], dict(do_sample=False, max_new_tokens=n + 7)),
            ("sampling", [1, 17, 42, 99, 5, 64], dict(do_sample=True, top_k=20, max_new_tokens=n))]
    for name, ids, kwargs in runs:
        torch.manual_seed(0)
        out, seconds, compiles = timed_generate(model, torch.tensor([ids], device="tpu"), min_new_tokens=1,
                                                **kwargs)
        new = out.shape[1] - len(ids)
        print(f"{name:>20}: {new} tokens in {seconds:.2f}s ({new / seconds:.0f} tokens/s), "
              f"{compiles} XLA compiles: {out[0, len(ids):len(ids) + 8].tolist()}...")
    print("ops that ran on the CPU:", torch_tpu.fallback_ops() or "none")


if __name__ == "__main__":
    main()
