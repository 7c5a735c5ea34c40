"""generation.backend = vllm: rollouts and evaluation decoding from a colocated vLLM engine (GPUs only; issue 43).

Every vLLM name used here is declared in harness/sampling/vllm_api.py and checked against the installed vLLM by
tests/harness/sampling/test_vllm_contract.py (which also checks, without vLLM, that this file uses nothing else).
On a CPU the import guard, the errors, the engine's settings (harness/sampling/vllm_plan.py), the weights it is
sent and the order of the engine calls (against a stand-in of the declared API) are tested; the real engine and
its tokens only on a GPU: benchmarks/device_rollout_check.py.

Design (vLLM's colocated offline engine, as TRL's `vllm_mode="colocate"`):
- One engine per process, in the trainer's process: `distributed_executor_backend="external_launcher"` (under
  torchrun every rank builds its own engine from the launcher's RANK / LOCAL_RANK / WORLD_SIZE; a single process
  gets a world of one), tensor parallel 1, the run's seed plus the rank. The stage starts it (`start_engine`) on
  every rank at once, before training (building it is collective), from the base model's folder, with the
  settings of vllm_plan.engine_spec: image count per prompt and context length from the stage's data and config,
  dtype and memory share from the generation config. One engine per process: a start with the same settings
  keeps it for another policy (an analysis' policy before and after RL), other settings drop it first (a later
  stage of an experiment run without a launcher, in the same process; `stop_engines`).
- Sleep mode (generation.vllm_sleep_level 1 or 2): the engine sleeps as soon as it is built and after every
  rollout / decoding (`sleep_engines`), so the policy update has the memory; before the next decoding it wakes
  the weights, receives the policy's weights, then wakes the KV cache (vLLM's documented order).
- Weights: the policy's merged weights (W + scale * B @ A for every LoRA layer, the trained merger, trained token
  rows) under their Hugging Face names, the whole model at every sync, through the workers' in-place reload
  (`LLM.collective_rpc("reload_weights", kwargs={"weights_iterator": ...})`). In process (the external launcher),
  the iterator and its GPU tensors are handed over by reference, one tensor at a time: a copy on the GPU, no
  serialization. Why not LoRA adapters by request (`enable_lora`, `LoRARequest`): the policy trains the merger in
  full and may train token rows, which an adapter cannot carry (vLLM loads at most one full module per adapter),
  and LoRA on Qwen2.5-VL's vision tower is experimental in vLLM (`enable_tower_connector_lora`). Why the whole
  model: the reload processes a packed layer (q/k/v, gate/up) when all its parts arrived, so a partial sync could
  leave a part unset; level 2 discards the weights anyway. A sync is skipped when the trainable parameters equal
  those last sent (and the engine kept its weights).
- Prompts: the chat-template texts of harness.prompting.batching with every view of the study; vLLM's processor (loaded
  from the base folder, with the policy processor's pixel limits) expands the image placeholders. The engine returns
  token ids, assembled into the tensors the other backends return (left-padded prompt from the processor,
  right-padded response). Sampling: temperature, top-p, top-k, repetition penalty, min/max new tokens, the end
  token as the only stop token, suppressed tokens by a -inf logit bias, one seed per prompt drawn from torch's
  generator (so the trainer's per-step seeding fixes it). Greedy decoding asks vLLM for one completion per request
  (vLLM refuses n > 1 without sampling), the prompt repeated. The tokens are not those of `generate`: other kernels,
  another sampler.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import socket
from collections.abc import Iterator, Sequence

import torch

from harness.models.precision import base_dtype
from harness.models.trainable import TOKEN_DELTA, unwrap
from harness.prompting.batching import prompt_text
from harness.sampling.vllm_plan import EngineSpec, engine_spec

_ENGINES: dict[int, VLLMEngine] = {}
INSTALL_HINT = "pip install 'regbench[vllm]'"


def vllm_missing() -> str | None:
    """Why vLLM cannot be imported here (one line), or None."""
    if importlib.util.find_spec("vllm") is None:
        return f"needs the vllm package, which is not installed here ({INSTALL_HINT})"
    return None


def require_vllm(device: torch.device) -> None:
    """Raise a one-line error unless vLLM can run here (CUDA device and the vllm package)."""
    if device.type != "cuda":
        raise ValueError(f"generation.backend=vllm needs a CUDA GPU (the model is on {device}); "
                         "use generation.backend=lean")
    missing = vllm_missing()
    if missing:
        raise ValueError(f"generation.backend=vllm {missing}; use generation.backend=lean")


def engine_weights(model, *, full: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face name, tensor) of the plain model the policy stands for, in module order: for each LoRA layer
    its merged weight W + scaling * B @ A (peft's merge, in W's dtype) and bias; for trainable token rows (peft's
    `trainable_token_indices`) the embedding with those rows replaced (a tied lm_head follows it). `full`: every
    other weight too (each shared tensor once); else only the trainable ones. One merged tensor at a time."""
    # lazy: start-up cost (peft)
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora.layer import Conv3d as LoraConv3d
    from peft.tuners.trainable_tokens import TrainableTokensLayer

    hf = unwrap(model)
    lora, tokens = {}, {}
    for name, mod in hf.named_modules():
        if isinstance(mod, LoraLinear | LoraConv3d):  # Conv3d: the patch embedding (model.lora_patch_embed)
            lora[name] = mod
        elif isinstance(mod, TrainableTokensLayer):  # `<wrapper>.token_adapter` -> the plain `<wrapper>.weight`
            tokens[name.rsplit(".", 1)[0]] = mod
    seen: set[int] = set()
    for key, t in hf.state_dict(keep_vars=True).items():
        if "lora_" in key or TOKEN_DELTA in key:
            continue
        name = key.replace(".token_adapter.base_layer", "").replace(".base_layer", "")
        owner, _, leaf = name.rpartition(".")
        if id(t) in seen:  # a tied weight: the engine ties it itself
            continue
        seen.add(id(t))
        value = None
        with torch.no_grad():  # left before each yield: the consumer runs in its own grad mode
            if owner in lora and leaf == "weight":
                mod = lora[owner]
                value = (t + mod.get_delta_weight(mod.active_adapters[0])).to(t.dtype)
            elif owner in tokens and leaf == "weight":
                mod = tokens[owner]
                if mod.tied_adapter is None:
                    value = mod.get_merged_weights(mod.active_adapters).detach()
            elif full or owner in lora or t.requires_grad:
                value = t.detach()
        if value is not None:
            yield name, value


def merged_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """Only the weights that training changes (engine_weights with full=False)."""
    return engine_weights(model, full=False)


def completion_token_ids(outputs) -> list[list[int]]:
    """Token ids of every completion of LLM.generate's results, prompt by prompt."""
    return [list(c.token_ids) for o in outputs for c in o.outputs]


def launch_env(device: torch.device, env: dict | None = None) -> dict[str, str]:
    """The torchrun variables the external launcher reads, for a process that no launcher started (a world of one
    on `device`); empty under a launcher."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return {}
    with socket.socket() as s:  # a free port for the world-of-one rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": str(device.index or 0), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)}


def _trainable_state(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters() if p.requires_grad]


class VLLMEngine:
    """A colocated vLLM engine for one policy model (module docstring)."""

    def __init__(self, spec: EngineSpec, processor, device: torch.device):
        # lazy: optional dependency (vllm)
        from vllm import LLM  # only here: CPU machines never import vllm

        for key, value in launch_env(device).items():
            os.environ.setdefault(key, value)
        self.spec, self.processor = spec, processor
        self.llm = LLM(model=spec.model, tensor_parallel_size=1, dtype=spec.dtype, seed=spec.seed,
                       gpu_memory_utilization=spec.gpu_memory_utilization,
                       mm_processor_kwargs=spec.mm_processor_kwargs, max_model_len=spec.max_model_len,
                       limit_mm_per_prompt={"image": spec.max_images}, enable_sleep_mode=spec.sleep_level > 0,
                       distributed_executor_backend="external_launcher", enable_prefix_caching=True)
        self._sent: list[torch.Tensor] | None = None  # the trainable parameters the engine's weights hold
        self.asleep = False
        self.sleep()  # training comes first

    def sleep(self) -> None:
        """Free the engine's GPU memory until the next decoding (sleep mode only)."""
        if self.spec.sleep_level == 0 or self.asleep:
            return
        self.llm.sleep(level=self.spec.sleep_level)
        self.asleep = True
        if self.spec.sleep_level == 2:  # the weights are discarded: the next wake needs them all
            self._sent = None

    def ready(self, model) -> None:
        """Wake the weights, send the policy's weights if they changed, wake the KV cache."""
        waking = self.asleep
        if waking:
            torch.cuda.empty_cache()  # the memory the update freed, back to the device for the engine
            self.llm.wake_up(tags=["weights"])
        sent = self.sync(model)
        if waking:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        if sent:  # nothing computed with the old weights may be reused (sleep resets these too)
            self.llm.reset_prefix_cache()
            self.llm.llm_engine.reset_encoder_cache()

    def sync(self, model) -> bool:
        """Send the policy's weights if the trainable parameters changed since the last send; True if sent."""
        live = [p for p in model.parameters() if p.requires_grad]
        if self._sent is not None and all(torch.equal(a, b) for a, b in zip(self._sent, live, strict=True)):
            return False
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": engine_weights(model, full=True),
                                                          "is_checkpoint_format": True})
        self._sent = _trainable_state(model)
        return True

    def generate(self, images: Sequence[Sequence], instructions: Sequence[str], *, n: int, do_sample: bool,
                 temperature: float, top_p: float, top_k: int, max_new_tokens: int, min_new_tokens: int,
                 repetition_penalty: float, suppress_tokens: Sequence[int], eos_token_id: int) -> list[list[int]]:
        """Response token ids, n per prompt, group-major (row b * n + g), each ending at its end token."""
        # lazy: optional dependency (vllm)
        from vllm import SamplingParams


        per_request, repeat = (n, 1) if do_sample else (1, n)  # greedy: vLLM takes n = 1 only
        prompts = [{"prompt": prompt_text(self.processor, ins, len(views)),
                    "multi_modal_data": {"image": list(views)}}
                   for ins, views in zip(instructions, images, strict=True) for _ in range(repeat)]
        seed = int(torch.randint(0, 2**31 - 1 - len(prompts) * per_request, (1,)))  # the caller's torch generator
        params = [SamplingParams(
            n=per_request, temperature=temperature if do_sample else 0.0, top_p=top_p if do_sample else 1.0,
            top_k=top_k if do_sample and top_k > 0 else 0, repetition_penalty=repetition_penalty,
            min_tokens=min_new_tokens, max_tokens=max_new_tokens, stop_token_ids=[eos_token_id], ignore_eos=True,
            logit_bias={int(t): float("-inf") for t in suppress_tokens} or None,
            seed=seed + i * per_request,  # vLLM gives completion g of a request seed + g
            detokenize=False, skip_special_tokens=False) for i in range(len(prompts))]
        outs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        return completion_token_ids(outs)


def start_engine(model, processor, generation, prompt_sets: Sequence[tuple], *, seed: int, rank: int = 0,
                 model_path: str | None = None) -> VLLMEngine:
    """Build the engine of `model` for a stage whose decodings are `prompt_sets` = [(images, instructions,
    max_new_tokens), ...] (vllm_plan.engine_spec), from the base folder `model_path` (default: the one the model
    was loaded from). Every process of a launch calls it at the same point (the engine's start is collective)."""
    device = next(model.parameters()).device
    require_vllm(device)
    path = model_path or unwrap(model).config._name_or_path
    spec = engine_spec(path, processor, generation, prompt_sets,
                       policy_dtype=str(base_dtype(model)).removeprefix("torch."), seed=seed, rank=rank)
    for key, engine in list(_ENGINES.items()):  # one engine per process (vLLM's parallel state is per process)
        if engine.spec != spec:
            stop_engines()  # an earlier stage's (an experiment run without a launcher runs its nodes in one process)
            break
        del _ENGINES[key]  # the same engine serves another policy (an analysis' policy before and after RL)
        engine._sent = None
        _ENGINES[id(model)] = engine
        return engine
    _ENGINES[id(model)] = engine = VLLMEngine(spec, processor, device)
    return engine


def stop_engines() -> None:
    """Drop this process's engines; vLLM frees an engine with its last reference (its executor's shutdown)."""
    if not _ENGINES:
        return
    _ENGINES.clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def sleep_engines() -> None:
    """After rollouts or a decoding: every engine of this process frees its GPU memory (sleep mode only)."""
    for engine in _ENGINES.values():
        engine.sleep()


def engine_for(model) -> VLLMEngine:
    engine = _ENGINES.get(id(model))
    if engine is None:
        raise ValueError("generation.backend=vllm: no engine was started for this model; the stage starts it "
                         "(harness.sampling.vllm_rollout.start_engine) with the prompts it will decode")
    return engine


def vllm_sequences(model, processor, batch: dict, images, instructions, *, n: int, pad_token_id: int,
                   **sampling) -> torch.Tensor:
    """Prompt + new tokens [rows, P + L] like decode_tokens returns (rows = prompts x n, group-major), where
    `batch` is the processor encoding of the repeated prompts."""
    device = batch["input_ids"].device
    require_vllm(device)
    engine = engine_for(model)
    engine.ready(model)
    responses = engine.generate(images, instructions, n=n, **sampling)
    P = batch["input_ids"].shape[1]
    L = max(len(r) for r in responses)
    out = torch.full((len(responses), P + L), pad_token_id, dtype=batch["input_ids"].dtype, device=device)
    out[:, :P] = batch["input_ids"]
    for i, r in enumerate(responses):
        out[i, P:P + len(r)] = torch.tensor(r, dtype=out.dtype, device=device)
    return out
