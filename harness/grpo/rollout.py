"""Rollouts: G sampled candidates per prompt from the old policy, and the logits path shared by the old,
reference and current policies (so their log-probs differ only by the parameters swapped in).

Rows are group-major: row b*G + g is candidate g of prompt b.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from harness.models.merged_lora import merged_lora
from harness.models.precision import autocast_for
from harness.prompting.batching import END, encode_repeated, suppressed_token_ids
from harness.sampling.decoding import decode_tokens
from harness.sampling.feature_memo import FeatureMemo
from harness.sampling.lean_forward import sequence_logits


@dataclass
class Rollout:
    sequences: torch.Tensor  # [N, P + L] prompt (left-padded) + response (right-padded)
    prompt_mask: torch.Tensor  # [N, P]
    response_mask: torch.Tensor  # [N, L] 1 on response tokens up to and including <|im_end|>
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor
    texts: list[str]  # N decoded responses, special tokens stripped
    # Images (views) of each row, in the order of image_grid_thw; None = one per row. Needed to cut rows out.
    images_per_row: list[int] | None = None
    # One key per image (order of image_grid_thw), equal keys = equal images: the trainer's (prompt index, view),
    # which the frozen passes' feature memos read (harness/sampling/feature_memo.py). None = not known.
    image_keys: list | None = None

    @property
    def prompt_len(self) -> int:
        return self.prompt_mask.shape[1]

    @property
    def responses(self) -> torch.Tensor:
        return self.sequences[:, self.prompt_len:]

    def logits(self, model) -> torch.Tensor:
        """`response_logits(model, self)`: what a token weighter (harness/token_weighting/) reads the policy with,
        without importing the engine."""
        return response_logits(model, self)

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(dim=1)

    def __len__(self) -> int:
        return self.sequences.shape[0]

    def rows(self, start: int, stop: int) -> Rollout:
        """Rows start..stop-1 with their images' patches (same widths: logits of a row do not depend on
        which other rows share its forward pass)."""
        per_row = self.images_per_row or [1] * len(self)
        if len(per_row) != len(self):
            raise ValueError(f"images_per_row has {len(per_row)} entries for {len(self)} rows")
        if (start, stop) == (0, len(self)):
            return self
        img0, img1 = sum(per_row[:start]), sum(per_row[:stop])
        patches = self.image_grid_thw.prod(dim=1).tolist()
        p0, p1 = sum(patches[:img0]), sum(patches[:img1])
        return Rollout(self.sequences[start:stop], self.prompt_mask[start:stop], self.response_mask[start:stop],
                       self.pixel_values[p0:p1], self.image_grid_thw[img0:img1], self.texts[start:stop],
                       per_row[start:stop], None if self.image_keys is None else self.image_keys[img0:img1])

    def image_starts(self) -> tuple[list[int], list[int]]:
        """(row_images, image_patches): row i's images are image_grid_thw[row_images[i]:row_images[i + 1]], image
        k's patches pixel_values[image_patches[k]:image_patches[k + 1]]."""
        return _cumulative(self.images_per_row or [1] * len(self)), _cumulative(self.image_grid_thw.prod(-1).tolist())

    def pick(self, rows: Sequence[int]) -> Rollout:
        """The given rows, in that order, with their images' patches (same widths, as `rows`)."""
        row_images, image_patches = self.image_starts()
        images = [k for i in rows for k in range(row_images[i], row_images[i + 1])]
        pixels = torch.cat([self.pixel_values[image_patches[k]:image_patches[k + 1]] for k in images])
        index = torch.tensor(list(rows), dtype=torch.long, device=self.sequences.device)
        return Rollout(self.sequences[index], self.prompt_mask[index], self.response_mask[index], pixels,
                       self.image_grid_thw[images], [self.texts[i] for i in rows],
                       [row_images[i + 1] - row_images[i] for i in rows],
                       None if self.image_keys is None else [self.image_keys[k] for k in images])


def _cumulative(counts) -> list[int]:
    """[0, c0, c0 + c1, ...]: where each of consecutive blocks of the given sizes starts, and the end."""
    out = [0]
    for c in counts:
        out.append(out[-1] + int(c))
    return out


def concat_rollouts(parts: Sequence[Rollout], pad_id: int) -> Rollout:
    """One rollout from rollouts of consecutive prompt micro-batches: prompts left-padded and responses
    right-padded to the widest part (masked out, so the rows' logits are unchanged)."""
    if len(parts) == 1:
        return parts[0]
    P = max(r.prompt_len for r in parts)
    L = max(r.response_mask.shape[1] for r in parts)
    seqs, pmasks, rmasks = [], [], []
    for r in parts:
        n, p, ln = len(r), r.prompt_len, r.response_mask.shape[1]
        seq = r.sequences.new_full((n, P + L), pad_id)
        seq[:, P - p:P + ln] = r.sequences
        pm = r.prompt_mask.new_zeros((n, P))
        pm[:, P - p:] = r.prompt_mask
        rm = r.response_mask.new_zeros((n, L))
        rm[:, :ln] = r.response_mask
        seqs.append(seq), pmasks.append(pm), rmasks.append(rm)
    per_row = [k for r in parts for k in (r.images_per_row or [1] * len(r))]
    keys = None if any(r.image_keys is None for r in parts) else [k for r in parts for k in r.image_keys]
    return Rollout(torch.cat(seqs), torch.cat(pmasks), torch.cat(rmasks), torch.cat([r.pixel_values for r in parts]),
                   torch.cat([r.image_grid_thw for r in parts]), [t for r in parts for t in r.texts], per_row, keys)


def response_mask_from(tokens: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 on every token up to and including the first end token of each row (all tokens if none)."""
    is_eos = (tokens == eos_id).long()
    seen_before = (torch.cumsum(is_eos, dim=1) - is_eos) > 0
    return (~seen_before).long()


@torch.no_grad()
def sample_rollout(model, processor, images: Sequence[Sequence], instructions: Sequence[str], *, group_size: int,
                   temperature: float, top_p: float, top_k: int, max_new_tokens: int, min_new_tokens: int,
                   repetition_penalty: float, backend: str = "hf", image_keys: list | None = None,
                   memo: FeatureMemo | None = None) -> Rollout:
    """Sample `group_size` candidates per prompt with whatever parameters are live in `model` (`backend`:
    generation.backend, harness/sampling/decoding.py). `image_keys` (one per image of the repeated rows, group
    major) become the rollout's; `memo`: the snapshot's vision features the prefill reads and fills (the lean
    backends), for the frozen pass of the same snapshot to read them back."""
    tok = processor.tokenizer
    batch = encode_repeated(processor, images, instructions, group_size)
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    eos = tok.convert_tokens_to_ids(END)
    was = model.training
    model.eval()
    with autocast_for(model):
        seqs = decode_tokens(
            model, batch, backend=backend, do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k,
            max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty,
            suppress_tokens=suppressed_token_ids(tok), pad_token_id=tok.pad_token_id, eos_token_id=eos,
            prompts=(processor, images, instructions), image_keys=image_keys, memo=memo,
        )
    model.train(was)
    P = batch["input_ids"].shape[1]
    resp = seqs[:, P:]
    mask = response_mask_from(resp, eos)
    texts = [t.strip() for t in tok.batch_decode(resp * mask + tok.pad_token_id * (1 - mask),
                                                 skip_special_tokens=True)]
    return Rollout(seqs, batch["attention_mask"], mask, batch["pixel_values"], batch["image_grid_thw"], texts,
                   [len(views) for views in images for _ in range(group_size)], image_keys)


def response_logits(model, ro: Rollout, memo: FeatureMemo | None = None) -> torch.Tensor:
    """Logits [N, L, V] that predict the response tokens, computed only for the response positions. `memo`: a
    frozen pass's vision features by `ro.image_keys` (harness/sampling/feature_memo.py; same numbers)."""
    L = ro.response_mask.shape[1]
    attn = torch.cat([ro.prompt_mask, ro.response_mask.to(ro.prompt_mask.dtype)], dim=1)
    # model(input_ids=..., pixel_values=...).logits, bit for bit (harness/sampling/lean_forward.py)
    with autocast_for(model):
        logits = sequence_logits(model, ro.sequences, attn, ro.pixel_values, ro.image_grid_thw, logits_to_keep=L + 1,
                                 image_keys=ro.image_keys, memo=memo if ro.image_keys is not None else None)
    return logits[:, :-1]


def merged_response_logits(model, ro: Rollout, memo: FeatureMemo | None = None, *,
                           logits_fn: Callable | None = None) -> torch.Tensor:
    """`response_logits` (or `logits_fn`, the same contract) with every LoRA layer as one product with W + s B A
    (rl.lora_pass = merged, harness/models/merged_lora.py): equal to float rounding, not bit for bit."""
    with merged_lora(model):
        return (logits_fn or response_logits)(model, ro, memo)
