"""The config sections other than RL: each field's help (meaning, unit or range, source) is its `help` metadata.

Sources: "REVA-PO" = the paper (Supp. D.2 holds its hyperparameters); "official code" = REVA-PO's released code;
"this project" = this project's own choice (docs/DESIGN.md). `regbench config show` prints each field's help.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from harness.config.presets import PRESETS


def knob(default: Any = MISSING, help: str = "", *, default_factory: Any = MISSING) -> Any:  # noqa: A002
    """A dataclass field whose help text lives in its metadata (as TRL's configs keep theirs)."""
    if not help:
        raise TypeError("every config field needs a help text")
    return field(default=default, default_factory=default_factory, metadata={"help": help})


def redefault(section: type, name: str, default: Any) -> Any:
    """Field `name` of `section` with another default and the same help (a subclass's own default)."""
    (f,) = [f for f in fields(section) if f.name == name]
    return knob(default, f.metadata["help"])


@dataclass
class DataConfig:
    dataset: str = knob("phantom", '"phantom" (the project\'s synthetic set), "iu_xray" or "mimic_cxr" (R2Gen '
                                   "annotation.json).")
    annotation: str | None = knob(None, "Path to annotation.json (R2Gen format or REVA-PO's "
                                        "annotation_with_categories.json). For the phantom set, left empty: the "
                                        "set is synthesized into `synth_dir` on first use.")
    image_dir: str | None = knob(None, "Folder the annotation's image paths are relative to.")
    allow_outside_image_dir: bool = knob(False, "Image paths in the annotation must stay inside image_dir (no "
                                                "absolute path, no `..`): a file copied from elsewhere cannot make a "
                                                "run read arbitrary files. true lifts that for an annotation file "
                                                "you trust (this project).")
    leak_check: str = knob("content", 'How images are compared across splits: "content" (default) refuses an '
                                      "image with the same bytes as one of another split, a copy under another "
                                      'name, as well as the same path; "path" compares paths and study ids only '
                                      "(this project, issue 49: harness/data/leaks.py).")
    views: int | None = knob(None, "Views per study: null = the data set's default (every view for IU-Xray, 1-5 "
                                   "per study, as REVA-PO's official loader; the first for MIMIC-CXR, as R2Gen's "
                                   "and the official loader); N = at most the first N.")
    report_cleaning: str = knob("r2gen", 'How reference reports are cleaned (harness/data/cleaning.py): "r2gen" = '
                                         "R2Gen's clean_report_iu_xray / clean_report_mimic_cxr (this project's "
                                         'default); "reva_po" = REVA-PO\'s official code: MIMIC-CXR adds ":" -> " :" '
                                         "to R2Gen's (words joined by a colon are split), IU-Xray and the phantom "
                                         "set as R2Gen (the MIMIC-CXR presets). docs/paper_vs_code.md.")
    synth_dir: str = knob("runs/data/phantom", "Folder of the synthetic (phantom) set (this project).")
    synth_n: int = knob(1500, "Studies in the synthetic set, >= 10 (this project).")
    synth_seed: int = knob(0, "Seed of the synthetic set; same seed -> identical files (this project).")
    synth_image_size: int = knob(128, "Side in pixels of the synthetic images, >= 32 (the phantom generator's "
                                      "bound, MIN_IMAGE_SIZE; this project).")
    report_variation: str = knob("none", 'How much the phantom\'s report language varies: "none" = one phrasing '
                                         "per statement, the plain grammar of every earlier study; \"low\" / "
                                         '"high" = several phrasings per statement, merged and split sentences, '
                                         "impression lines (harness/data/phantom/phrasings.py; this project, "
                                         "issue 44). A varied set gets its own folder.")
    max_train: int | None = knob(None, "Cap on training samples (null = all); handy for smoke runs.")
    max_val: int | None = knob(None, "Cap on validation samples (null = all); handy for smoke runs.")
    max_test: int | None = knob(None, "Cap on test samples (null = all); handy for smoke runs.")
    train_min_tokens: int | None = knob(None, 'The REVA-PO RL subset (Supp. D.2): "discard reports that are '
                                              'shorter than 30 tokens ... randomly sample 10k". Drops training '
                                              "reports with fewer whitespace tokens (the cleaned report's words "
                                              "and punctuation; the paper does not say which tokenizer); null = "
                                              "keep all.")
    train_subset: str = knob("first", '"random" draws max_train of the training reports at random with '
                                      "train_subset_seed (REVA-PO Supp. D.2's random 10k; kept in data order), "
                                      '"first" takes the first max_train.')
    train_subset_seed: int = knob(0, "Seed of train_subset=random; fixed, so every run seed trains on the same "
                                     "subset.")


@dataclass
class ModelConfig:
    preset: str = knob("tiny", '"tiny" builds a small Qwen2.5-VL from a config; "qwen2.5-vl-3b"/"qwen2.5-vl-7b" '
                               "load `path`.")
    path: str | None = knob(None, "Local folder (or hub id when the network allows) of the base model; tiny: built "
                                  "by stage 0.")
    dtype: str | None = knob(None, "Base weights' dtype (float32, bfloat16, float16): null = the preset's "
                                   "(harness/config/presets.py: tiny float32; 3B/7B bfloat16, this project's choice "
                                   "for GPUs with bf16; float16 as on the paper's V100s).")
    device: str = knob("auto", 'Where the VLM runs: "auto" = the local GPU (cuda:$LOCAL_RANK under a distributed '
                               'launch) when CUDA is available, else the CPU; or "cpu", "cuda", "cuda:N". Not part '
                               "of any run's key: the same run on another device is the same experiment.")
    attn_implementation: str | None = knob(None, "Attention kernels of the VLM, transformers' attn_implementation "
                                                 '("eager", "sdpa", "flash_attention_2"): null = the preset\'s '
                                                 "(harness/config/presets.py: tiny eager, 3B/7B sdpa). The tiny "
                                                 "preset files set sdpa (issue 27: the same function to float "
                                                 "rounding, fewer ops).")
    image_size: int | None = knob(None, "Square image side in pixels fed to the VLM, a multiple of 28: null = the "
                                        "preset's (official code: pad to square, resize to 336 for the 3B/7B "
                                        "presets; tiny: 112).")
    lora_r: int = knob(32, "LoRA rank of stages 2/3 (REVA-PO Supp. D.2: r = alpha = 32) on all linear layers of "
                           "the vision encoder and the LLM; the merger trains fully.")
    lora_alpha: int = knob(32, "LoRA alpha (REVA-PO Supp. D.2: 32).")
    lora_dropout: float = knob(0.1, "LoRA dropout, in [0, 1) (REVA-PO Supp. D.2: 0.1).")
    train_format_tokens: bool = knob(False, "With prompt.output_format=think_report: the stage that adds the LoRA "
                                            "adapter (SFT, or RL from a model without one) also trains the "
                                            "embedding rows (and the output rows: tied in the tiny model) of the "
                                            "tokens MRG-R1's four tags are written with, through peft's "
                                            "trainable_token_indices, saved in the adapter; later stages keep "
                                            "training what the adapter holds. This project's choice (issue 24): "
                                            "no stage-0 target of the tiny model contains those tokens, so stage 0 "
                                            "pushed their rows, with the other never-seen tokens', into one cluster "
                                            "that LoRA alone cannot separate; MRG-R1's 7B base knows the tags and "
                                            "its LoRA covers attention and MLP only. Off: the plain LoRA adapter.")
    tiny_text_hidden: int = knob(64, "Tiny preset: text hidden size (this project; docs/DESIGN.md 'The tiny testbed').")
    tiny_text_layers: int = knob(2, "Tiny preset: text layers (this project; docs/DESIGN.md 'The tiny testbed').")
    tiny_vision_hidden: int = knob(64, "Tiny preset: vision hidden size (this project; docs/DESIGN.md "
                                   "'The tiny testbed').")
    tiny_vision_depth: int = knob(2, "Tiny preset: vision blocks (this project; docs/DESIGN.md 'The tiny testbed').")
    tiny_vocab_size: int = knob(1200, "Tiny preset: tokenizer vocabulary size (this project).")
    lora_patch_embed: bool = knob(False, "Stages 2-3: LoRA also on the vision patch embedding's Conv3d "
                                         "(`model.visual.patch_embed.proj`, through peft's LoRA Conv3d). The "
                                         "official code's target list [qkv, proj, gate_proj, up_proj, down_proj, "
                                         "q_proj, k_proj, v_proj, o_proj] (train_configs/stage2/*.yaml, "
                                         "stage3/*.yaml; reva_po/models/reva.py: peft suffix match) catches that "
                                         "Conv3d by its name `proj`: true = the official set (the paper presets); "
                                         "false = linear layers only (this project's default; the paper says 'all "
                                         "linear layers', Supp. D.2).")
    warmup_trainable: str = knob("merger", 'What stage 1 (warm-up) trains: "merger" = the whole merger, its '
                                           "ln_q norm and MLP (this project's default, as the paper's Sec. 3.1 "
                                           'says: the merger); "merger_mlp" = only `visual.merger.mlp`, its ln_q '
                                           "frozen, as the official stage 1 (reva_po/models/reva.py REVA_stage1: "
                                           "requires_grad on 'visual.merger.mlp' only; the paper presets). Stages "
                                           "2-3 train the whole merger either way (official too).")
    gradient_checkpointing: bool = knob(False, "Recompute activations in the backward pass (transformers' "
                                               "gradient checkpointing, non-reentrant) in the model stages: less "
                                               "memory for more compute (this project; off by default).")

    def __post_init__(self) -> None:
        # The preset owns image size and dtype unless they are set (an unknown preset is left to `validate`).

        preset = PRESETS.get(self.preset)
        owned = set()
        for key in ("image_size", "dtype", "attn_implementation"):
            if preset is not None and getattr(self, key) is None:
                setattr(self, key, getattr(preset, key))
                owned.add(key)
        # Not a field (so not in to_dict): which values came from the preset, i.e. may yield to a checkpoint's.
        self._preset_owned = frozenset(owned)


@dataclass
class PromptConfig:
    instruction: str = knob("Write the findings section of the chest X-ray report.", "The instruction of every "
                            "prompt.")
    disease_template: str = knob("The classifier suggests: {diseases}.", "Stage 2 (REVA-PO Sec. 3.2): predicted "
                                 "positive disease names are inserted into the instruction through this template "
                                 "(official code: 'The following findings may be present: {diseases}.', "
                                 "reva_po/models/reva.py build_prompt).")
    disease_list_format: str = knob("comma", "How {diseases} is written: \"comma\" = the names lowercased, joined "
                                             "by ', ', 'no finding' when none is predicted (this project); "
                                             "\"python_list\" = the official code's f-string of the Python list of "
                                             "names as the classifier names them, e.g. ['Cardiomegaly', 'Pleural "
                                             "Effusion'], and [] when none is predicted "
                                             "(reva_po/models/reva.py build_prompt; the paper presets).")
    disease_separator: str = knob(" ", "What stands between the instruction and the disease sentence: ' ' (this "
                                       "project) or '\\n' (official code: instruction + '\\n' + the disease "
                                       "sentence, reva_po/models/reva.py build_prompt; the paper presets).")
    max_report_tokens: int | None = knob(100, "Report tokens kept as training targets, >= 1; null = the whole "
                                              "report, as the official code (reva_po/models/reva.py: prompt + "
                                              "report + eos, no truncation; its max_txt_len only bounds "
                                              "generation; the paper presets).")
    output_format: str = knob("plain", "What a model is taught to write (harness/prompting/output_format.py): 'plain' "
                              "(the report; REVA-PO) or 'think_report' (MRG-R1, paper 002: a reasoning span and the "
                              "report inside <think>...</think><report>...</report>, the layout its format reward "
                              "checks). With think_report, SFT targets carry that layout (the reasoning span: the "
                              "observations the reference states present or possible; project's choice, MRG-R1 gives "
                              "no cold start), the instruction asks for it (project's wording), and validation and "
                              "test score the <report> part (rewards.report_part.extract_report). Set it for sft, rl "
                              "and eval alike.")


@dataclass
class ClassifierConfigSection:
    dir: str | None = knob(None, "Folder written by `regbench classifier train` (classifier.safetensors + "
                                 "classifier.json).")
    arch: str = knob("tiny_vit", "Architecture of the 14-observation classifier: a timm ViT name, tiny_vit, or "
                                 "tiny_cnn (a small conv net; docs/calibration.md).")
    img_size: int = knob(112, "Classifier input side in pixels, >= 1.")
    global_pool: str = knob("avg", 'Pooling of the ViT\'s tokens: "avg" (Medical-MAE fine-tuning, and it trains '
                                   'far better from scratch on the tiny preset) or "token" (CLS).')
    epochs: int = knob(20, "Classifier training epochs, >= 1.")
    batch_size: int = knob(64, "Classifier batch size, >= 1.")
    lr: float = knob(6.25e-5, "Classifier learning rate (AdamW), > 0.")
    weight_decay: float = knob(0.05, "Classifier AdamW weight decay, >= 0.")
    adam_beta2: float = knob(0.999, "AdamW beta2 of the classifier, in [0, 1).")
    pretrained_path: str | None = knob(None, "Weights to start the classifier from (null = random init from the "
                                             "seed): a local checkpoint file, or a classifier folder of `regbench "
                                             "classifier train` (the IU-Xray classifier starts from MIMIC-CXR's in "
                                             "the official code, train_configs/stage2_cls/iuxray_stage2_cls.yaml "
                                             "pretrained_cls_ckpt_mimic; a study's `upstream:` sets it).")
    pretrained_format: str = knob("regbench", 'Layout of classifier.pretrained_path: "regbench" = a timm state dict '
                                              "loaded non-strictly (this project's); 'medical_mae' = a Medical-MAE "
                                              '/ MAE checkpoint ({"model": ...}, github.com/lambert-x/medical_mae) '
                                              "loaded as the official reva_po/models/med_visual_encoder.py does: head "
                                              "and MAE decoder dropped, position embedding resampled, every other "
                                              "tensor of the ViT required (harness/models/classifier/"
                                              "medical_mae.py).")
    drop_path: float = knob(0.0, "Stochastic depth rate of the classifier ViT's blocks, in [0, 1); official "
                                 "med_visual_encoder.py builds its ViT-B/16 with drop_path_rate 0.2.")
    layer_decay: float | None = knob(None, "Layer-wise learning-rate decay of the classifier ViT, in (0, 1]: the "
                                           "official groups of reva_po/utils/lr_decay.py (block i at lr x decay^("
                                           "depth - i), embeddings at decay^(depth + 1), fc_norm and head at "
                                           "decay; no weight decay on 1-D tensors, pos_embed, cls_token); 0.55 in "
                                           "the official reva_po/runners/runner_base.py for MIMIC-CXR and "
                                           "IU-Xray. null = one AdamW group with weight decay on every parameter "
                                           "(this project's).")
    scheduler: str = knob("constant", 'Classifier learning-rate schedule: "constant" (this project\'s; the paper '
                                      'names none) or "warmup_cosine" = DeepSpeed\'s WarmupCosineLR as the '
                                      "official train_configs/stage2_cls/zero_*_stage2_cls.json set it: linear "
                                      "warm-up from 0 over classifier.warmup_steps, cosine down to "
                                      "classifier.min_lr_ratio x lr at classifier.schedule_steps, stepped after "
                                      "every optimizer step (the first update at lr 0, as there).")
    warmup_steps: int = knob(0, "Warm-up optimizer steps of classifier.scheduler warmup_cosine, >= 1 there "
                                "(official warmup_num_steps: 169 MIMIC-CXR, 32 IU-Xray, one epoch each).")
    schedule_steps: int | None = knob(None, "Optimizer steps at which the warm-up cosine reaches its floor "
                                            "(DeepSpeed total_num_steps; official 3380 MIMIC-CXR, 640 IU-Xray); "
                                            "null = the run's own number of steps.")
    min_lr_ratio: float = knob(0.0, "Floor of the warm-up cosine as a fraction of each group's learning rate, in "
                                    "[0, 1] (DeepSpeed cos_min_ratio: a ratio, not an absolute rate; official 0.01 "
                                    "MIMIC-CXR, 0.1 IU-Xray).")
    max_grad_norm: float | None = knob(None, "Clip the classifier's gradient norm to this before each optimizer "
                                             "step, > 0 (official DeepSpeed json gradient_clipping 1.0); null = no "
                                             "clipping (this project's).")
    micro_batch_size: int | None = knob(None, "Images per forward/backward pass of the classifier, > 0 (gradient "
                                              "accumulation up to classifier.batch_size: the same step to float "
                                              "rounding for a ViT, whose LayerNorm has no batch statistics; not "
                                              "for tiny_cnn's BatchNorm). The official run spreads its batch of "
                                              "1,600 over GPUs with DeepSpeed (zero_mimic_stage2_cls.json); one "
                                              "GPU needs micro-batches to hold it (`regbench doctor PRESET` plans "
                                              "it). null = the whole batch in one pass (this project's).")
    select: str = knob("val_loss", 'Which epoch the classifier keeps: "val_loss" = the lowest validation BCE (this '
                                   'project\'s) or "mean_auc" = the highest mean ROC AUC (scikit-learn roc_auc_score) '
                                   "over the labels that have both classes in the validation split, the first such "
                                   "epoch on ties (official reva_po/tasks/report_generation.py agg_metrics, "
                                   "runner_base.py best epoch).")
    normalization: str = knob("imagenet", "Pixel statistics of the classifier's input: cxr (mean 0.5056, std 0.252 "
                                          "on every channel: the official REVA-PO classifier transform and "
                                          "Medical-MAE's chest X-ray fine-tuning; the real presets set it) or "
                                          "imagenet (this project's tiny preset, trained from scratch).")
    amp_bf16: bool = knob(False, "Mixed precision (Micikevicius et al. 2018, in bf16; not in the paper, which trained "
                                 "in fp16 on V100s): the classifier's convolutions and matrix products run in bf16 "
                                 "under autocast, weights, optimizer, batch norm and loss in fp32; in training, "
                                 "validation and its predictions. On CUDA, or a CPU with native bf16 (AVX512-BF16 or "
                                 "AMX; refused on other CPUs, where it is slower). Not exact: see benchmarks/"
                                 "RESULTS.md (issue 27) for its time and the downstream SFT quality.")


@dataclass
class GenerationConfig:
    max_new_tokens: int = knob(100, "Evaluation decodes greedily (official code): at most this many new tokens.")
    min_new_tokens: int = knob(0, "Evaluation: at least this many new tokens, <= max_new_tokens.")
    repetition_penalty: float = knob(1.0, "Evaluation repetition penalty, > 0 (1 = none).")
    batch_size: int = knob(32, "Prompts per decoding batch, >= 1.")
    backend: str = knob("lean", 'Decoding loop of RL rollouts, validation and test (issue 15): "hf" = '
                                "transformers' `generate`; \"lean\" = harness/sampling/lean_decode.py, the same tokens "
                                "(tests/harness/sampling/test_lean_decode.py: every sampling setting of "
                                "experiments/, eager and sdpa, fp32 and bf16; on CPU) without generate's per-step "
                                "overhead; \"fused\" = lean, except that sampled decode steps (RL rollouts, "
                                "analyses) run harness/sampling/fused_step.py: merged LoRA, fused matrix products, "
                                "about half the ops per decoded token, float rounding differs (the same distribution, "
                                "tests/harness/sampling/test_fused_step.py; float32 weights only), greedy "
                                "validation and test stay lean's exact tokens; \"vllm\" = "
                                "harness/sampling/vllm_rollout.py, a colocated vLLM engine on a GPU (other tokens; "
                                "not yet run on a GPU; pip install 'regbench[vllm]').")
    vllm_dtype: str | None = knob(None, "generation.backend=vllm: the engine's weight dtype (bfloat16, float16, "
                                        "float32): null = the policy's own base dtype (model.dtype). This project "
                                        "(issue 43; the engine was bf16 whatever the model).")
    vllm_gpu_memory_utilization: float = knob(0.3, "generation.backend=vllm: share of the GPU's memory the colocated "
                                                   "engine may take for its weights, activations and KV cache, in "
                                                   "(0, 1] (vLLM's gpu_memory_utilization; TRL's colocate default "
                                                   "0.3). The policy, its optimizer and snapshots need the rest "
                                                   "while the engine is awake. This project (issue 43).")
    vllm_sleep_level: int = knob(1, "generation.backend=vllm: vLLM's sleep mode between decodings (issue 43): 1 = "
                                    "after every rollout or decoding the engine's weights go to CPU memory and its KV "
                                    "cache is freed, so the policy update has the GPU (host memory: the model's "
                                    "bf16 weights per process, 16.6 GB at 7B); 2 = the weights are discarded "
                                    "instead and the whole model is sent at each wake (TRL's choice; vLLM's level 2 "
                                    "has corrupted some VLMs' rollouts, NVIDIA-NeMo/RL#2631); 0 = no sleep, the "
                                    "engine keeps its share the whole run.")


@dataclass
class EvalConfig:
    ce_backend: str = knob("rules", 'CE labels: "rules" (rewards/chexpert.py, offline) or "chexbert" (f1chexbert '
                                    "with its real weights).")
    chexbert_mode: str = knob("paper", '"paper": only positive counts (REVA-PO / R2Gen protocol); "rrg": uncertain '
                                       "counts as positive too.")
    radgraph: str = knob("auto", 'RadGraph F1: "auto" (reported when the weights are present, else marked '
                                 'missing), "off", or "required".')
    radgraph_model: str = knob("radgraph-xl", "RadGraph model: radgraph or radgraph-xl.")
    gold_reader: str = knob("v1", 'The phantom\'s gold reader (gold_* metrics): "v1" = the generator\'s own '
                                  "sentences looked up exactly (harness/data/phantom/gold_reader.py; every earlier "
                                  'study); "v2" = reads meaning: findings, negation, hedges, normality statements, '
                                  "in any wording; degenerate text states nothing (gold_reader_v2.py; this "
                                  "project, issue 44). Both read every plain reference exactly; on model outputs "
                                  "they differ, so v1 stays the default.")
