"""Every vLLM name and parameter that harness/sampling/vllm_rollout.py uses, in one place (issue 43).

Imports nothing (neither vllm nor harness), so that tests/harness/sampling/test_vllm_contract.py can check this list
against whatever vLLM is installed (a side environment with vLLM's own torch and transformers), and check, without
vLLM, that the backend uses nothing else (by reading its source). A vLLM release that renames or drops one of these
fails that test, not a GPU job hours into a run.
"""

from __future__ import annotations

# The oldest vLLM these names were checked against (the `vllm` extra in pyproject.toml requires at least this).
MIN_VERSION = "0.33.0"

# (dotted name, keyword parameters the backend passes): a class's are those of its constructor. Each one must be a
# named parameter of the installed callable (a **kwargs catch-all does not count).
CALLABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm.LLM", ("model", "tensor_parallel_size", "dtype", "seed", "gpu_memory_utilization",
                  "mm_processor_kwargs")),
    # LLM(**kwargs) hands the rest to EngineArgs.
    ("vllm.EngineArgs", ("max_model_len", "limit_mm_per_prompt", "enable_sleep_mode",
                         "distributed_executor_backend", "enable_prefix_caching")),
    ("vllm.LLM.generate", ("prompts", "sampling_params", "use_tqdm")),
    ("vllm.LLM.sleep", ("level",)),
    ("vllm.LLM.wake_up", ("tags",)),
    ("vllm.LLM.collective_rpc", ("method", "kwargs")),
    ("vllm.LLM.reset_prefix_cache", ()),
    ("vllm.v1.engine.llm_engine.LLMEngine.reset_encoder_cache", ()),
    ("vllm.SamplingParams", ("n", "temperature", "top_p", "top_k", "repetition_penalty", "min_tokens",
                             "max_tokens", "stop_token_ids", "ignore_eos", "logit_bias", "seed", "detokenize",
                             "skip_special_tokens")),
    # What LLM.generate returns: RequestOutput.outputs, each a CompletionOutput with its token_ids.
    ("vllm.outputs.RequestOutput", ("outputs",)),
    ("vllm.outputs.CompletionOutput", ("token_ids",)),
    # collective_rpc("reload_weights", kwargs=...) runs the worker's method, which hands its arguments to the
    # model runner's: vLLM's in-place reload (vllm/model_executor/model_loader/reload/inplace.py).
    ("vllm.v1.worker.gpu_worker.Worker.reload_weights", ()),
    ("vllm.v1.worker.gpu_model_runner.GPUModelRunner.reload_weights", ("weights_iterator", "is_checkpoint_format")),
)

# Instance attributes the backend reads: (owner, attribute, the class it holds). Checked in the owner's __init__.
ATTRIBUTES: tuple[tuple[str, str, str], ...] = (
    ("vllm.LLM", "llm_engine", "vllm.v1.engine.llm_engine.LLMEngine"),
)

# Worker methods called by name through LLM.collective_rpc: name -> the callable whose parameters the kwargs meet.
RPC_METHODS: dict[str, str] = {
    "reload_weights": "vllm.v1.worker.gpu_model_runner.GPUModelRunner.reload_weights",
}

# String values the backend passes: (where they are defined, values). A typing.Literal alias is checked by its
# arguments, a function by its source (the wake_up tags are documented and checked there).
VALUES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm.config.parallel.DistributedExecutorBackend", ("external_launcher",)),
    ("vllm.LLM.wake_up", ("weights", "kv_cache")),
)

# Attributes of generate's results, read in vllm_rollout.completion_token_ids only.
OUTPUT_ATTRIBUTES = ("outputs", "token_ids")


def declared_parameters(name: str) -> tuple[str, ...]:
    """The declared keyword parameters of `name` (KeyError if it is not declared)."""
    return dict(CALLABLES)[name]
