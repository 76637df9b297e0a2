"""Text generation with Hugging Face Transformers on tpu.

Builds a tiny random Llama from a config (nothing is downloaded), saves it,
loads it back with ``device_map="tpu"`` and generates greedily, by sampling,
and with a static cache (decoding compiled by ``torch.compile(backend="tpu")``).

    python examples/hf_generate.py [--arch llama|qwen2|mistral|gpt2]
"""
import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

import torch_tpu  # noqa: E402,F401  (registers the device; torch's autoload does too)


def tiny_config(arch):
    common = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if arch == "gpt2":
        return transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                       bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
            "mistral": transformers.MistralConfig}[arch](**common)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama", choices=["llama", "qwen2", "mistral", "gpt2"])
    parser.add_argument("--new-tokens", type=int, default=4)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(tiny_config(args.arch)).save_pretrained(folder)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, device_map="tpu", dtype=torch.float32)
    print("model on", model.device)

    prompt = torch.tensor([[1, 17, 42, 99, 5, 64]], device="tpu")
    for name, kwargs in [("greedy", dict(do_sample=False)),
                         ("sampling", dict(do_sample=True, top_k=20)),
                         ("static cache", dict(do_sample=False, cache_implementation="static"))]:
        torch.manual_seed(0)
        start = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=args.new_tokens, **kwargs)
        print(f"{name:>12}: {out[0].tolist()}  ({time.perf_counter() - start:.1f}s, first call compiles)")
    print("ops that ran on the CPU:", torch_tpu.fallback_ops() or "none")


if __name__ == "__main__":
    main()
