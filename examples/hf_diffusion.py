"""Text-to-image with Hugging Face Diffusers on tpu: a tiny random Stable
Diffusion pipeline (UNet, VAE, CLIP text encoder and a tokenizer over a
26-letter vocabulary, all from small configs), run on the CPU and on tpu with
the same seed; the images match.

    python examples/hf_diffusion.py
"""
import json
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import diffusers  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import torch_tpu  # noqa: E402,F401


def tiny_pipeline(folder):
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(folder, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    tokenizer = transformers.CLIPTokenizer(os.path.join(folder, "vocab.json"),
                                           os.path.join(folder, "merges.txt"), model_max_length=16)
    torch.manual_seed(0)
    text_encoder = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=16, projection_dim=32,
        bos_token_id=0, eos_token_id=1, pad_token_id=1))
    unet = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=32)
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 32), latent_channels=4,
        layers_per_block=1, norm_num_groups=32, sample_size=16)
    scheduler = diffusers.DDIMScheduler(num_train_timesteps=100, beta_schedule="linear",
                                        clip_sample=False, steps_offset=1)
    pipe = diffusers.StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                             scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                             requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def main():
    with tempfile.TemporaryDirectory() as folder:
        pipe = tiny_pipeline(folder)
    kwargs = dict(prompt="a cat", num_inference_steps=3, height=16, width=16, guidance_scale=3.0,
                  output_type="np")
    on_cpu = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    pipe.to("tpu")
    # the generator stays on the CPU: torch 2.13 cannot make a tpu torch.Generator
    on_tpu = pipe(generator=torch.Generator().manual_seed(0), **kwargs).images
    print("pipeline on", pipe.device, "image", on_tpu.shape, "max |tpu - cpu| =", float(np.abs(on_tpu - on_cpu).max()))
    print("ops that ran on the CPU:", torch_tpu.fallback_ops() or "none")


if __name__ == "__main__":
    main()
