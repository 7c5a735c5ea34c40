"""Chat prompts and processor inputs for Qwen2.5-VL (training and generation share one path).

A prompt is `[instruction (+ predicted diseases), image(s)]` in the model's chat template (REVA-PO Sec. 3.2:
q = [I, D, V]). For training, the report and `<|im_end|>` follow the generation prompt, and labels cover
exactly those tokens (Eq. 1 is over report tokens only). Padding is on the left, so the report is the tail
of every row and generation continues right after the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

IGNORE = -100
END = "<|im_end|>"
# Special tokens that a report must never contain; generation suppresses them (vision/control tokens).
NEVER_GENERATE = (
    "<|endoftext|>", "<|im_start|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
)


DISEASE_LIST_FORMATS = ("comma", "python_list")


def disease_list(diseases: Sequence[str], list_format: str = "comma") -> str:
    """The `{diseases}` of the disease sentence (prompt.disease_list_format): "comma" = lowercased names joined by
    ", " ("no finding" when empty; this project); "python_list" = the official code's f-string of the Python list
    (reva_po/models/reva.py build_prompt: "['Cardiomegaly', 'Edema']", "[]" when empty)."""
    if list_format == "comma":
        return ", ".join(d.lower() for d in diseases) if diseases else "no finding"
    if list_format == "python_list":
        return str([str(d) for d in diseases])  # str() of a list of str: the names' repr, as an f-string writes it
    raise ValueError(f"disease list format must be one of {', '.join(DISEASE_LIST_FORMATS)}, got {list_format!r}")


def instruction_text(instruction: str, diseases: Sequence[str] | None = None,
                     disease_template: str = "The classifier suggests: {diseases}.", list_format: str = "comma",
                     separator: str = " ") -> str:
    """The instruction, plus (when `diseases` is given) `separator` and the disease sentence: REVA-PO's q = [I, D]."""
    if diseases is None:
        return instruction
    return f"{instruction}{separator}{disease_template.format(diseases=disease_list(diseases, list_format))}"


def prompt_text(processor, instruction: str, n_images: int) -> str:
    content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": instruction}]
    messages = [{"role": "user", "content": content}]
    return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def suppressed_token_ids(tokenizer) -> list[int]:
    ids = []
    for t in NEVER_GENERATE:
        i = tokenizer.convert_tokens_to_ids(t)
        if i is not None and i != tokenizer.unk_token_id:
            ids.append(int(i))
    return ids


def truncate_report(tokenizer, report: str, max_tokens: int | None) -> list[int]:
    """The report's token ids, the first `max_tokens` of them (None: all, as the official code's SFT targets)."""
    ids = tokenizer(report, add_special_tokens=False)["input_ids"]
    return ids[:max_tokens]


def encode_prompts(processor, images: Sequence[Sequence], instructions: Sequence[str]) -> dict:
    """Processor inputs for generation: one prompt per sample, its views in order."""
    texts = [prompt_text(processor, ins, len(views)) for ins, views in zip(instructions, images, strict=True)]
    flat = [im for views in images for im in views]
    processor.tokenizer.padding_side = "left"
    return dict(processor(text=texts, images=flat, return_tensors="pt", padding=True))


def encode_repeated(processor, images: Sequence[Sequence], instructions: Sequence[str], repeats: int) -> dict:
    """encode_prompts of every prompt `repeats` times in a row (rollout groups), from one encoding per prompt:
    the processor encodes each prompt on its own and pads to the longest, which repeating does not change
    (tests/harness/prompting/test_batching.py checks the tensors are equal)."""
    batch = encode_prompts(processor, images, instructions)
    if repeats == 1:
        return batch
    if set(batch) - {"mm_token_type_ids"} != {"input_ids", "attention_mask", "pixel_values", "image_grid_thw"}:
        return encode_prompts(processor, [v for v in images for _ in range(repeats)],
                              [s for s in instructions for _ in range(repeats)])
    grid = batch["image_grid_thw"]
    views = [len(v) for v in images]
    blocks = torch.split(batch["pixel_values"], [int(p.sum()) for p in torch.split(grid.prod(-1), views)])
    out = {
        "input_ids": batch["input_ids"].repeat_interleave(repeats, dim=0),
        "attention_mask": batch["attention_mask"].repeat_interleave(repeats, dim=0),
        "pixel_values": torch.cat([b for b in blocks for _ in range(repeats)]),
        "image_grid_thw": torch.cat([g for g in torch.split(grid, views) for _ in range(repeats)]),
    }
    if "mm_token_type_ids" in batch:  # transformers 5.x's processor: the token types its get_rope_index reads
        out["mm_token_type_ids"] = batch["mm_token_type_ids"].repeat_interleave(repeats, dim=0)
    return out


def encode_sft(processor, images: Sequence[Sequence], instructions: Sequence[str], reports: Sequence[str],
               max_report_tokens: int | None) -> dict:
    """Processor inputs plus `labels` (IGNORE everywhere but the report tokens and the closing <|im_end|>)."""
    tok = processor.tokenizer
    end_id = tok.convert_tokens_to_ids(END)
    targets = [truncate_report(tok, r, max_report_tokens) + [end_id] for r in reports]
    texts = [
        prompt_text(processor, ins, len(views)) + tok.decode(t[:-1]) + END
        for ins, views, t in zip(instructions, images, targets, strict=True)
    ]
    flat = [im for views in images for im in views]
    tok.padding_side = "left"
    batch = dict(processor(text=texts, images=flat, return_tensors="pt", padding=True))
    ids = batch["input_ids"]
    labels = torch.full_like(ids, IGNORE)
    for i, t in enumerate(targets):
        n = len(t)
        tail = ids[i, -n:].tolist()
        if tail != t:
            # Byte-level BPE can merge across the prompt/report boundary only if the template changes;
            # fail loudly instead of training on misaligned labels.
            raise ValueError(f"report tokens of sample {i} do not line up with the encoded sequence")
        labels[i, -n:] = ids[i, -n:]
    batch["labels"] = labels
    return batch


def model_inputs(batch: dict) -> dict:
    """The keys Qwen2_5_VLForConditionalGeneration.forward takes (drops labels and processor extras; keeps
    transformers 5.x's mm_token_type_ids, without which its forward gives 1-D positions)."""
    keep = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")
    return {k: batch[k] for k in keep if k in batch}
