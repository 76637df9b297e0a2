"""``model.generate()`` defaults for models on tpu: shape-stable decoding.

Transformers' defaults give every decoding step new shapes: the DynamicCache
grows by one position per step, and the loop grows the token ids, position
ids and attention mask on the device of the inputs.  On tpu each new shape
is a new XLA executable, so a first ``generate()`` compiles for every token.

For a decoder-only model on tpu, greedy or sampling, when the caller picked
no cache, ``generate()`` here only fills in settings Transformers already has:

- ``cache_implementation="static"`` with ``max_cache_len`` rounded up to a
  bucket (a power of two, at least 128).  Transformers then compiles the
  decoding step with ``torch.compile(backend="tpu", dynamic=False)`` and
  keeps the largest cache length for later calls, so one executable serves
  every prompt and ``max_new_tokens`` within a bucket.
- ``prefill_chunk_size=1``: the prompt goes through that same compiled step
  one token at a time instead of an eager prefill whose every op would
  compile for the prompt's length.
- The loop's bookkeeping (token ids, mask, logits processors, sampling) runs
  on the host, which Transformers supports for CPU inputs: each step sends
  the step's ids to tpu and brings the last logits back, which the stop check
  already waits for.  Token ids given on tpu are returned on tpu.

A ``prefill_chunk_size`` or ``max_cache_len`` the caller passes is kept; an
explicit cache or ``cache_implementation``, beam search, an assistant model,
``custom_generate`` or ``disable_compile`` leaves the call to Transformers.
``TORCH_TPU_GENERATE_DEFAULTS=0`` turns this off.

Upstreamable form: a device hook next to ``_default_compile_config`` (which
already routes tpu to ``backend="tpu"``), e.g.
``PreTrainedModel._default_generation_overrides()`` returning these settings
for tpu, read by ``_prepare_generation_config`` for unset fields.
"""
import functools
import os

import torch

MIN_CACHE_BUCKET = 128
_HOST_INPUTS = ("attention_mask", "position_ids", "token_type_ids")


def enabled() -> bool:
    return os.environ.get("TORCH_TPU_GENERATE_DEFAULTS", "1").lower() not in ("0", "false", "off", "no")


def cache_bucket(length: int) -> int:
    """The static cache length serving ``length`` positions: a power of two >= 128."""
    bucket = MIN_CACHE_BUCKET
    while bucket < length:
        bucket *= 2
    return bucket


def _setting(model, generation_config, kwargs, name):
    if name in kwargs:
        return kwargs[name]
    config = generation_config if generation_config is not None else model.generation_config
    return getattr(config, name, None)


def _applies(model, inputs, generation_config, kwargs) -> bool:
    if not enabled() or model.device.type != "tpu" or model.config.is_encoder_decoder:
        return False
    if not getattr(type(model), "_can_compile_fullgraph", False) or not model._supports_default_dynamic_cache():
        return False
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 or inputs.is_floating_point():
        return False  # token ids only (not embeddings or other modalities)
    if kwargs.get("past_key_values") is not None or kwargs.get("inputs_embeds") is not None:
        return False
    if any(kwargs.get(k) is not None for k in ("assistant_model", "custom_generate", "prompt_lookup_num_tokens")):
        return False
    if _setting(model, generation_config, kwargs, "cache_implementation") is not None:
        return False
    if _setting(model, generation_config, kwargs, "disable_compile"):
        return False
    return (_setting(model, generation_config, kwargs, "num_beams") or 1) == 1


def _max_positions(model, generation_config, kwargs, prompt_length) -> int:
    new = _setting(model, generation_config, kwargs, "max_new_tokens")
    if new is not None:
        return prompt_length + new
    return _setting(model, generation_config, kwargs, "max_length") or 20  # Transformers' default max_length


def _to_host(value):
    return value.cpu() if isinstance(value, torch.Tensor) and value.device.type == "tpu" else value


def _to_device(result, device):
    if isinstance(result, torch.Tensor):
        return result.to(device)
    if getattr(result, "sequences", None) is not None:
        result.sequences = result.sequences.to(device)
    return result


def shape_stable_generate(generate):
    """Wrap ``GenerationMixin.generate`` with the tpu defaults above."""

    @functools.wraps(generate)
    def wrapper(self, *args, **kwargs):
        if len(args) > 2:
            return generate(self, *args, **kwargs)
        inputs = args[0] if args else kwargs.get("inputs", kwargs.get("input_ids"))
        generation_config = args[1] if len(args) > 1 else kwargs.get("generation_config")
        if not _applies(self, inputs, generation_config, kwargs):
            return generate(self, *args, **kwargs)
        kwargs["cache_implementation"] = "static"
        if _setting(self, generation_config, kwargs, "max_cache_len") is None:
            kwargs["max_cache_len"] = cache_bucket(_max_positions(self, generation_config, kwargs,
                                                                  inputs.shape[-1]))
        if _setting(self, generation_config, kwargs, "prefill_chunk_size") is None:
            kwargs["prefill_chunk_size"] = 1
        on_tpu = inputs.device.type == "tpu"
        for name in _HOST_INPUTS:
            if name in kwargs:
                kwargs[name] = _to_host(kwargs[name])
        args = (_to_host(inputs),) + args[1:] if args else ()
        for name in ("inputs", "input_ids"):
            if name in kwargs:
                kwargs[name] = _to_host(kwargs[name])
        result = generate(self, *args, **kwargs)
        return _to_device(result, inputs.device) if on_tpu else result

    wrapper._torch_tpu_shape_stable = True
    return wrapper


def install(module=None) -> None:
    """Wrap ``transformers.generation.utils.GenerationMixin.generate`` (once)."""
    if module is None:
        import transformers.generation.utils as module
    mixin = module.GenerationMixin
    if not getattr(mixin.generate, "_torch_tpu_shape_stable", False):
        mixin.generate = shape_stable_generate(mixin.generate)
