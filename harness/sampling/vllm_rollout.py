"""generation.backend = vllm: rollouts and evaluation decoding from a colocated vLLM engine (GPUs only).

NOT RUN ON A GPU YET. No GPU machine was lent to the session that wrote it, and the lent machines cannot
install vLLM (no registry there; its wheel is larger than what a run may carry): the code follows vLLM's public
API (`LLM`, `SamplingParams`, the model's `load_weights`), and benchmarks/device_rollout_check.py is the prepared
check. What runs on the CPU and is tested: the import guard (nothing here imports vllm until an engine is
built), the clear error where vLLM or CUDA is missing, and `merged_weights` (the weights the engine receives).

Design: one engine per policy model, started from the frozen base's folder (`config._name_or_path`), in the same
process (colocated; a share of GPU memory, `gpu_memory_utilization`). Before each generation the trainable
parameters (LoRA + merger) are compared with those last sent; when they changed (after an old-policy sync, or a
snapshot swapped in) the merged weights W + scale * B @ A of every LoRA layer, the merger, and an embedding with
trained token rows go to the engine under their Hugging Face names. Prompts are the chat-template texts of
harness.batching with their images; the engine returns token ids, assembled into the same tensors as the other
backends (left-padded prompt from the processor, right-padded response). Sampling: temperature, top-p, top-k,
repetition penalty, min/max new tokens, the end token as stop token, suppressed tokens by a -inf logit bias, one
vLLM seed per request drawn from torch's generator (so the trainer's per-step seeding fixes it). The tokens are not
those of `generate`: other kernels, another sampler.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence

import torch

_ENGINES: dict[int, VLLMEngine] = {}


def require_vllm(device: torch.device) -> None:
    """Raise a one-line error unless vLLM can run here (CUDA device and the vllm package)."""
    if device.type != "cuda":
        raise ValueError(f"generation.backend=vllm needs a CUDA GPU (the model is on {device}); "
                         "use generation.backend=lean")
    if importlib.util.find_spec("vllm") is None:
        raise ValueError("generation.backend=vllm needs the vllm package (pip install vllm); "
                         "use generation.backend=lean")


def merged_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face name, tensor) of every weight that training changes: for each LoRA layer (Linear, or the
    patch embedding's Conv3d) its merged weight
    W + scaling * B @ A (peft's merge, in W's dtype) and bias; for trainable token rows (peft's
    `trainable_token_indices`) the embedding with those rows replaced (a tied lm_head follows it); every other
    trainable parameter as it is."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora.layer import Conv3d as LoraConv3d
    from peft.tuners.trainable_tokens import TrainableTokensLayer

    from harness.models.trainable import TOKEN_DELTA, unwrap

    hf = unwrap(model)
    lora_names = set()
    for name, mod in hf.named_modules():
        if isinstance(mod, LoraLinear | LoraConv3d):  # Conv3d: the patch embedding (model.lora_patch_embed)
            lora_names.add(name)
            base = mod.get_base_layer()
            with torch.no_grad():
                delta = mod.get_delta_weight(mod.active_adapters[0])
                yield f"{name}.weight", (base.weight + delta).to(base.weight.dtype)
                if base.bias is not None:
                    yield f"{name}.bias", base.bias.detach()
        elif isinstance(mod, TrainableTokensLayer) and mod.tied_adapter is None:
            with torch.no_grad():  # `<wrapper>.token_adapter` -> the plain model's `<wrapper>.weight`
                yield f"{name.rsplit('.', 1)[0]}.weight", mod.get_merged_weights(mod.active_adapters).detach()
    for name, p in hf.named_parameters():
        if (p.requires_grad and "lora_" not in name and TOKEN_DELTA not in name
                and not any(name.startswith(n + ".") for n in lora_names)):
            yield name, p.detach()


def _trainable_state(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters() if p.requires_grad]


class VLLMEngine:
    """A colocated vLLM engine for one policy model (module docstring)."""

    def __init__(self, model, processor, *, max_model_len: int, gpu_memory_utilization: float = 0.3,
                 max_images: int = 1):
        from vllm import LLM  # only here: CPU machines never import vllm

        from harness.models.trainable import unwrap

        self.processor = processor
        self.llm = LLM(model=unwrap(model).config._name_or_path, dtype="bfloat16",
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                       limit_mm_per_prompt={"image": max_images}, enable_prefix_caching=True)
        self._sent: list[torch.Tensor] | None = None

    def sync(self, model) -> bool:
        """Send the merged weights if the trainable parameters changed since the last send; True if sent."""
        live = [p for p in model.parameters() if p.requires_grad]
        if self._sent is not None and all(torch.equal(a, b) for a, b in zip(self._sent, live, strict=True)):
            return False
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.model.load_weights(merged_weights(model))
        self.llm.reset_prefix_cache()
        self._sent = _trainable_state(model)
        return True

    def generate(self, images: Sequence[Sequence], instructions: Sequence[str], *, n: int, do_sample: bool,
                 temperature: float, top_p: float, top_k: int, max_new_tokens: int, min_new_tokens: int,
                 repetition_penalty: float, suppress_tokens: Sequence[int], eos_token_id: int) -> list[list[int]]:
        """Response token ids, n per prompt, group-major (row b * n + g), each ending at its end token."""
        from vllm import SamplingParams

        from harness.batching import prompt_text

        prompts = [{"prompt": prompt_text(self.processor, ins, len(views)),
                    "multi_modal_data": {"image": list(views) if len(views) > 1 else views[0]}}
                   for ins, views in zip(instructions, images, strict=True)]
        seed = int(torch.randint(0, 2**31 - 1, (1,)))  # from the caller's torch generator state
        params = SamplingParams(
            n=n, temperature=temperature if do_sample else 0.0, top_p=top_p if do_sample else 1.0,
            top_k=(top_k if top_k > 0 else -1) if do_sample else -1, repetition_penalty=repetition_penalty,
            min_tokens=min_new_tokens, max_tokens=max_new_tokens, stop_token_ids=[eos_token_id],
            logit_bias={int(t): float("-inf") for t in suppress_tokens} or None, seed=seed, detokenize=False,
            skip_special_tokens=False)
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        return [list(c.token_ids) for o in outs for c in o.outputs]


def engine_for(model, processor, *, max_model_len: int) -> VLLMEngine:
    key = id(model)
    if key not in _ENGINES:
        _ENGINES[key] = VLLMEngine(model, processor, max_model_len=max_model_len)
    return _ENGINES[key]


def vllm_sequences(model, processor, batch: dict, images, instructions, *, n: int, pad_token_id: int,
                   **sampling) -> torch.Tensor:
    """Prompt + new tokens [rows, P + L] like decode_tokens returns (rows = prompts x n, group-major), where
    `batch` is the processor encoding of the repeated prompts."""
    device = batch["input_ids"].device
    require_vllm(device)
    P = batch["input_ids"].shape[1]
    engine = engine_for(model, processor, max_model_len=P + sampling["max_new_tokens"] + 8)
    engine.sync(model)
    responses = engine.generate(images, instructions, n=n, **sampling)
    L = max(len(r) for r in responses)
    out = torch.full((len(responses), P + L), pad_token_id, dtype=batch["input_ids"].dtype, device=device)
    out[:, :P] = batch["input_ids"]
    for i, r in enumerate(responses):
        out[i, P:P + len(r)] = torch.tensor(r, dtype=out.dtype, device=device)
    return out
