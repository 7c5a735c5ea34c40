"""generation.backend=vllm on a CPU machine: never imported, clear errors, the weights it sends, the settings it is
built with, and the order of its calls against a stand-in of the declared vLLM API (harness/sampling/vllm_api.py).

The engine itself needs a GPU and vllm (benchmarks/device_rollout_check.py); the declared API is checked against the
installed vLLM by test_vllm_contract.py; these tests cover what runs here.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from harness.config import load_config
from harness.models.tiny import build_tiny_model
from harness.models.trainable import add_lora, set_trainable, unwrap
from harness.prompting.batching import encode_prompts, encode_repeated
from harness.sampling import vllm_rollout
from harness.sampling.decoding import decode_tokens
from harness.sampling.vllm_rollout import engine_weights, merged_weights


def test_vllm_is_never_imported_by_the_cpu_paths(tmp_path):
    """Importing the harness and decoding with lean, even with backend=vllm configured, imports no vllm."""
    code = ("import sys, harness.sampling.decoding, harness.grpo.rollout, harness.sampling.vllm_rollout\n"
            "import harness.stages.rl\n"
            "from harness.config import load_config\n"
            "assert load_config(None, ['generation.backend=vllm']).generation.backend == 'vllm'\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_backend_vllm_on_cpu_is_a_clear_error(tiny_tokenizer, tiny_processor, xray_images):
    assert load_config(None, ["generation.backend=vllm"]).generation.backend == "vllm"
    model = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                             vision_depth=1, image_size=56)
    batch = encode_prompts(tiny_processor, [[xray_images[0]]], ["describe"])
    with pytest.raises(ValueError, match="generation.backend=vllm needs a CUDA GPU .* generation.backend=lean"):
        decode_tokens(model, batch, backend="vllm", max_new_tokens=3, min_new_tokens=0, repetition_penalty=1.0,
                      do_sample=False, temperature=1.0, top_p=1.0, top_k=0, suppress_tokens=[], pad_token_id=0,
                      eos_token_id=1, prompts=(tiny_processor, [[xray_images[0]]], ["describe"]))


def test_merged_weights_equal_peft_merge(tiny_tokenizer):
    """The weights sent to the engine: peft's merge of every LoRA layer (W + scale B A) and the trained merger,
    under the names of the plain model's state dict; a forward pass of the plain model loaded with them equals
    the LoRA model's."""
    base = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=2, vision_hidden=16,
                            vision_depth=1, image_size=56)
    model = add_lora(copy.deepcopy(base), r=4, alpha=8, dropout=0.0)
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # LoRA B != 0 and a changed merger, as after RL steps
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    sent = dict(merged_weights(model))
    plain_names = set(base.state_dict())
    assert set(sent) <= plain_names
    assert any(".merger." in n for n in sent) and any("q_proj.weight" in n for n in sent)
    merged = copy.deepcopy(model)
    for mod in unwrap(merged).modules():
        if hasattr(mod, "merge") and hasattr(mod, "lora_A"):
            mod.merge()
    want = {k.replace(".base_layer", ""): v for k, v in unwrap(merged).state_dict().items() if "lora_" not in k}
    for name, t in sent.items():
        assert torch.allclose(t, want[name], rtol=0, atol=1e-6), name
    ids = torch.randint(5, 200, (2, 7), generator=gen)
    with torch.no_grad():
        before = base(input_ids=ids).logits
        untouched = {n: p for n, p in base.state_dict().items() if n not in sent}
        base.load_state_dict({**untouched, **sent})
        a = base(input_ids=ids).logits
        b = model.eval()(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5) and not torch.allclose(a, before, atol=1e-3)


def test_merged_weights_carry_trained_token_rows(tiny_tokenizer):
    """With the tags' token rows trained (model.train_format_tokens, issue 24) the engine gets the embedding with
    those rows replaced under its plain name (the tied lm_head follows it), never peft's delta parameter."""
    from harness.prompting.output_format import format_token_ids

    base = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                            vision_depth=1, image_size=56)
    ids = format_token_ids(tiny_tokenizer)
    model = add_lora(copy.deepcopy(base), r=4, alpha=8, dropout=0.0, token_indices=ids)
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    sent = dict(merged_weights(model))
    assert set(sent) <= set(base.state_dict()) and "model.language_model.embed_tokens.weight" in sent
    ids_in = torch.tensor([ids + [5, 6, 7]])
    with torch.no_grad():
        base.load_state_dict({**base.state_dict(), **sent})
        torch.testing.assert_close(base(input_ids=ids_in).logits, model.eval()(input_ids=ids_in).logits,
                                   rtol=0, atol=1e-5)


def _trained_lora_model(tiny_tokenizer, token_rows: bool):
    from harness.prompting.output_format import format_token_ids

    base = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=2, vision_hidden=16,
                            vision_depth=1, image_size=56)
    ids = format_token_ids(tiny_tokenizer) if token_rows else None
    model = add_lora(copy.deepcopy(base), r=4, alpha=8, dropout=0.0, token_indices=ids)
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return base, model


@pytest.mark.parametrize("token_rows", [False, True])
def test_full_engine_weights_are_the_plain_model_the_policy_stands_for(tiny_tokenizer, token_rows):
    """What the engine's in-place reload receives at every sync (issue 43): every weight of the plain model once
    (a tied lm_head is left to the engine), LoRA merged, trained token rows in, the base's other weights as they
    are; a plain model loaded with them computes the LoRA model's logits, the vision tower included."""
    base, model = _trained_lora_model(tiny_tokenizer, token_rows)
    sent = list(engine_weights(model, full=True))
    names = [n for n, _ in sent]
    plain = base.state_dict()
    assert len(names) == len(set(names)) and set(names) <= set(plain)
    shared = {n for n, t in plain.items()  # tied pairs
              if any(t.data_ptr() == u.data_ptr() for m, u in plain.items() if m != n)}
    assert set(plain) - set(names) <= shared and len(set(plain) - set(names)) == len(shared) // 2
    assert names == [n for n in plain if n in set(names)]  # module order: each packed layer completes in turn
    assert any("visual.blocks.0.attn.qkv.weight" in n for n in names)
    ids = torch.randint(5, 200, (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        base.load_state_dict(dict(sent), strict=False)
        torch.testing.assert_close(base(input_ids=ids).logits, model.eval()(input_ids=ids).logits, rtol=0,
                                   atol=1e-5)
    changed = dict(merged_weights(model))
    assert set(changed) < set(names)
    for n, t in changed.items():
        assert torch.equal(t, dict(sent)[n]), n


def test_engine_spec_from_the_data_and_the_config(tiny_processor, xray_images):
    """Image count per prompt = the most views of any prompt; context = the longest prompt as the processor
    encodes it + the largest max_new_tokens of the stage's decodings; dtype, memory share and sleep level from the
    generation config (dtype null: the policy's); seed + rank; the processor's pixel limits."""
    from harness.sampling.vllm_plan import engine_spec, pixel_limits, tokens_per_image, view_counts

    train = ([[xray_images[0]], xray_images[:3]], ["describe", "describe the findings at length please"])
    val = ([xray_images[:2]], ["describe"])
    gen = load_config(None, ["generation.max_new_tokens=40"]).generation
    spec = engine_spec("/base", tiny_processor, gen, [(*train, 60), (*val, gen.max_new_tokens)],
                       policy_dtype="float32", seed=7, rank=3)
    encoded = encode_prompts(tiny_processor, *train)["input_ids"].shape[1]  # left-padded to the longest
    assert spec.max_images == 3 and spec.max_model_len == encoded + 60
    assert view_counts(train[0]) == [1, 3] and tokens_per_image(tiny_processor) == (56 // 28) ** 2
    assert (spec.model, spec.dtype, spec.seed, spec.gpu_memory_utilization, spec.sleep_level) == \
        ("/base", "float32", 10, 0.3, 1)
    lo, hi = pixel_limits(tiny_processor)
    assert spec.mm_processor_kwargs == {"min_pixels": lo, "max_pixels": hi}
    gen2 = load_config(None, ["generation.vllm_dtype=bfloat16", "generation.vllm_gpu_memory_utilization=0.5",
                              "generation.vllm_sleep_level=2"]).generation
    spec2 = engine_spec("/base", tiny_processor, gen2, [(*val, 5)], policy_dtype="float32", seed=0, rank=0)
    assert (spec2.dtype, spec2.gpu_memory_utilization, spec2.sleep_level, spec2.max_images) == ("bfloat16", 0.5, 2, 2)


@pytest.mark.parametrize("override,why", [("generation.vllm_dtype=half", "must be null, bfloat16"),
                                          ("generation.vllm_gpu_memory_utilization=0", "must be in \\(0, 1\\]"),
                                          ("generation.vllm_gpu_memory_utilization=1.5", "must be in \\(0, 1\\]"),
                                          ("generation.vllm_sleep_level=3", "must be 0, 1 or 2")])
def test_bad_vllm_settings_are_refused(override, why):
    from harness.config import ConfigError

    with pytest.raises(ConfigError, match=why):
        load_config(None, [override])


def test_a_stage_with_backend_vllm_is_refused_where_vllm_does_not_import(monkeypatch):
    """One line naming the key and the install command, before any model or data: the CLI's stage_config and
    begin_stage both run check_names."""
    from harness.checks.preflight import check_names
    from harness.config import ConfigError

    monkeypatch.setattr(vllm_rollout.importlib.util, "find_spec", lambda name: None)
    cfg = load_config(None, ["generation.backend=vllm"])
    for stage in ("rl", "eval"):
        with pytest.raises(ConfigError) as e:
            check_names(cfg, stage)
        assert str(e.value) == ("'generation.backend' = 'vllm' needs the vllm package, which is not installed here "
                                "(pip install 'regbench[vllm]'); use generation.backend=lean")
    check_names(cfg, "sft")  # a stage that does not decode is not refused
    check_names(load_config(None, []), "rl")


def test_backend_vllm_without_a_gpu_is_refused_before_the_stage(monkeypatch):
    from harness.checks.preflight import check_names
    from harness.config import ConfigError

    monkeypatch.setattr(vllm_rollout, "vllm_missing", lambda: None)  # as if vllm imported
    with pytest.raises(ConfigError, match="'generation.backend' = 'vllm' needs a CUDA GPU .* generation.backend=lean"):
        check_names(load_config(None, ["generation.backend=vllm", "model.device=cpu"]), "rl")


def test_launch_env_of_a_process_no_launcher_started():
    env = vllm_rollout.launch_env(torch.device("cuda", 2), env={})
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")} == \
        {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "2", "MASTER_ADDR": "127.0.0.1"}
    assert int(env["MASTER_PORT"]) > 0
    assert vllm_rollout.launch_env(torch.device("cuda", 0), env={"RANK": "3", "WORLD_SIZE": "8"}) == {}


# -- a stand-in of the declared vLLM API: the engine's calls, in order -----------------------------------------

class _Recorder:
    def __init__(self):
        self.calls = []


def _stand_in_vllm(rec: _Recorder, eos: int):
    """A `vllm` module with the declared names only, each taking exactly the declared keyword parameters."""
    import types

    from harness.sampling import vllm_api

    declared = dict(vllm_api.CALLABLES)

    def check(name, kwargs):
        extra = set(kwargs) - set(declared[name]) - (set(declared["vllm.EngineArgs"]) if name == "vllm.LLM" else set())
        assert not extra, f"{name}: {extra} not declared"

    class SamplingParams:
        def __init__(self, **kwargs):
            check("vllm.SamplingParams", kwargs)
            self.__dict__.update(kwargs)

    class Engine:
        def reset_encoder_cache(self):
            rec.calls.append(("reset_encoder_cache",))

    class LLM:
        def __init__(self, **kwargs):
            check("vllm.LLM", kwargs)
            rec.calls.append(("LLM", kwargs))
            self.llm_engine = Engine()

        def sleep(self, **kwargs):
            check("vllm.LLM.sleep", kwargs)
            rec.calls.append(("sleep", kwargs["level"]))

        def wake_up(self, **kwargs):
            check("vllm.LLM.wake_up", kwargs)
            rec.calls.append(("wake_up", tuple(kwargs["tags"])))

        def collective_rpc(self, method, **kwargs):
            check("vllm.LLM.collective_rpc", kwargs)
            check(vllm_api.RPC_METHODS[method], kwargs["kwargs"])
            names = [n for n, _ in kwargs["kwargs"]["weights_iterator"]]
            rec.calls.append(("rpc", method, len(names)))

        def reset_prefix_cache(self):
            rec.calls.append(("reset_prefix_cache",))

        def generate(self, prompts, **kwargs):
            check("vllm.LLM.generate", kwargs)
            params = kwargs["sampling_params"]
            rec.calls.append(("generate", prompts, params))
            out = types.SimpleNamespace
            return [out(outputs=[out(token_ids=[10 + i, 11 + g, eos]) for g in range(p.n)])
                    for i, p in enumerate(params)]

    return types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams)


@pytest.mark.parametrize("level", [1, 2])
def test_engine_calls_in_order_against_a_stand_in(monkeypatch, tiny_tokenizer, tiny_processor, xray_images, level):
    """Sleep right after the start; before each decoding wake the weights, sync (only if changed, or always after
    a level-2 sleep), wake the KV cache, reset the caches after a sync; sleep after rollouts and decodings. The
    prompts carry every view; one seed per prompt; greedy asks n = 1 per repeated prompt."""
    import sys

    from harness.sampling.decoding import generate_reports

    rec = _Recorder()
    eos = tiny_processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    monkeypatch.setitem(sys.modules, "vllm", _stand_in_vllm(rec, eos))
    monkeypatch.setattr(vllm_rollout, "require_vllm", lambda device: None)
    monkeypatch.setattr(vllm_rollout.torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(vllm_rollout, "_ENGINES", {})
    _, model = _trained_lora_model(tiny_tokenizer, False)
    images = [xray_images[:2], [xray_images[2]]]
    instructions = ["describe", "describe the findings"]
    gen = load_config(None, [f"generation.vllm_sleep_level={level}"]).generation
    vllm_rollout.start_engine(model, tiny_processor, gen, [(images, instructions, 8)], seed=3, rank=1,
                              model_path="/base")
    (_, built), first_sleep = rec.calls[0], rec.calls[1]
    assert built["distributed_executor_backend"] == "external_launcher" and built["enable_sleep_mode"] is True
    assert built["limit_mm_per_prompt"] == {"image": 2} and built["tensor_parallel_size"] == 1
    assert (built["model"], built["seed"], built["dtype"]) == ("/base", 4, "float32")
    assert first_sleep == ("sleep", level)
    n_weights = len(list(engine_weights(model, full=True)))

    def sample():
        rec.calls.clear()
        batch = encode_repeated(tiny_processor, images, instructions, 3)
        torch.manual_seed(0)
        seqs = decode_tokens(model, batch, backend="vllm", max_new_tokens=8, min_new_tokens=0,
                             repetition_penalty=1.0, do_sample=True, temperature=0.7, top_p=0.9, top_k=0,
                             suppress_tokens=[5], pad_token_id=0, eos_token_id=eos,
                             prompts=(tiny_processor, images, instructions))
        vllm_rollout.sleep_engines()  # what the trainer does after its rollouts
        return batch, seqs

    batch, seqs = sample()
    kinds = [c[0] for c in rec.calls]
    assert kinds == ["wake_up", "rpc", "wake_up", "reset_prefix_cache", "reset_encoder_cache", "generate", "sleep"]
    assert rec.calls[0][1] == ("weights",) and rec.calls[2][1] == ("kv_cache",)
    assert rec.calls[1] == ("rpc", "reload_weights", n_weights)
    _, prompts, params = rec.calls[5]
    assert [len(p["multi_modal_data"]["image"]) for p in prompts] == [2, 1]
    assert [p.n for p in params] == [3, 3] and params[1].seed - params[0].seed == 3
    assert params[0].temperature == 0.7 and params[0].logit_bias == {5: float("-inf")}
    assert params[0].stop_token_ids == [eos] and params[0].ignore_eos is True
    P = batch["input_ids"].shape[1]
    assert torch.equal(seqs[:, :P], batch["input_ids"])
    assert seqs[:, P:].tolist() == [[10 + b, 11 + g, eos] for b in range(2) for g in range(3)]

    sample()  # the same weights: no sync after a level-1 sleep; all of them again after level 2
    kinds = [c[0] for c in rec.calls]
    assert kinds == (["wake_up", "wake_up", "generate", "sleep"] if level == 1 else
                     ["wake_up", "rpc", "wake_up", "reset_prefix_cache", "reset_encoder_cache", "generate", "sleep"])

    with torch.no_grad():  # an update: the next decoding syncs
        next(p for p in model.parameters() if p.requires_grad).add_(0.1)
    rec.calls.clear()
    texts = generate_reports(model, tiny_processor, images, instructions, max_new_tokens=8, backend="vllm",
                             progress=False, num_return_sequences=2)
    kinds = [c[0] for c in rec.calls]
    assert kinds == ["wake_up", "rpc", "wake_up", "reset_prefix_cache", "reset_encoder_cache", "generate", "sleep"]
    _, prompts, params = rec.calls[5]
    assert len(prompts) == 4 and [p.n for p in params] == [1] * 4 and params[0].temperature == 0.0
    assert len(texts) == 4


def test_one_engine_per_process(monkeypatch, tiny_tokenizer, tiny_processor, xray_images):
    """The same settings: the engine is kept for another policy (resynced in full); other settings (a later stage
    in the same process): the old engine is dropped before the new one starts."""
    import sys

    rec = _Recorder()
    monkeypatch.setitem(sys.modules, "vllm", _stand_in_vllm(rec, 1))
    monkeypatch.setattr(vllm_rollout, "require_vllm", lambda device: None)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(vllm_rollout, "_ENGINES", {})
    _, before = _trained_lora_model(tiny_tokenizer, False)
    _, after = _trained_lora_model(tiny_tokenizer, False)
    gen = load_config(None, []).generation
    sets = [([xray_images[:2]], ["describe"], 8)]
    first = vllm_rollout.start_engine(before, tiny_processor, gen, sets, seed=0, model_path="/base")
    first._sent = []
    assert vllm_rollout.start_engine(after, tiny_processor, gen, sets, seed=0, model_path="/base") is first
    assert first._sent is None and vllm_rollout.engine_for(after) is first
    with pytest.raises(ValueError, match="no engine was started"):
        vllm_rollout.engine_for(before)
    other = vllm_rollout.start_engine(after, tiny_processor, gen, [(*sets[0][:2], 50)], seed=0, model_path="/base")
    assert other is not first and list(vllm_rollout._ENGINES.values()) == [other]
    assert [c[0] for c in rec.calls].count("LLM") == 2
