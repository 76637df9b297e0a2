"""Causal-LM fine-tuning with the Hugging Face Trainer on tpu.

Accelerate 1.15 has no tpu branch, so the Trainer's Accelerator would keep the
model on the CPU; ``ACCELERATE_TORCH_DEVICE=tpu`` makes it pick tpu (set below
if you did not export it).  The model is a tiny random Llama built from a
config; the dataset is a plain list of dicts.

    python examples/hf_finetune.py
"""
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "tpu")

import torch  # noqa: E402
import transformers  # noqa: E402

import torch_tpu  # noqa: E402,F401


def main():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64)
    model = transformers.AutoModelForCausalLM.from_config(config)
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, 128, (16,), generator=g) for _ in range(4)]
    data = [{"input_ids": r, "labels": r.clone()} for r in rows * 4]

    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out, per_device_train_batch_size=4, max_steps=8, learning_rate=3e-2,
            lr_scheduler_type="constant", logging_steps=2, save_steps=4, report_to=[], disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
        print("training on", trainer.accelerator.device, "/", args.device)
        trainer.train()
        print("checkpoints:", sorted(d for d in os.listdir(out) if d.startswith("checkpoint")))
        resumed = transformers.Trainer(model=transformers.AutoModelForCausalLM.from_config(config),
                                       args=transformers.TrainingArguments(**{**args.to_dict(), "max_steps": 10,
                                                                              "output_dir": out}),
                                       train_dataset=data)
        resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-8"))
        print("resumed to step", resumed.state.global_step)
    # the resumed state carries the logged history of the first run
    print("losses by step:", {h["step"]: round(h["loss"], 3) for h in resumed.state.log_history if "loss" in h})
    print("ops that ran on the CPU:", torch_tpu.fallback_ops() or "none")


if __name__ == "__main__":
    main()
