"""How far the RL policy has moved from the policy RL started from (the SFT model), measured on the validation
reports: the x axis of the reward over-optimisation frontier (Gao et al., 2022: gold and proxy reward against
sqrt(KL(pi || pi_init))).

Measured on the live policy's greedy validation reports (those the validation decodes anyway), not on samples:
at every position t of a report y the KL between the two next-token distributions is computed exactly over the
vocabulary, KL_t = sum_v pi(v | y<t) (log pi(v | y<t) - log pi_0(v | y<t)), from the same tempered logits the RL
loss uses (rl.logprob_temperature, else rl.temperature). `kl_start_seq` is the mean over reports of sum_t KL_t
(a sequence-level KL along the greedy path; on sampled paths its mean would be KL(pi || pi_0) itself),
`kl_start_token` the mean of KL_t over all report tokens (the scale of the trainer's per-token `kl_mean`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from harness.grpo.rollout import Rollout, response_logits
from harness.prompting.batching import END, encode_prompts


def encode_responses(processor, images: Sequence[Sequence], instructions: Sequence[str],
                     texts: Sequence[str]) -> Rollout:
    """Prompts (left-padded) + the given response texts closed by <|im_end|> (right-padded), as a Rollout."""
    tok = processor.tokenizer
    batch = encode_prompts(processor, images, instructions)
    end, pad = tok.convert_tokens_to_ids(END), tok.pad_token_id
    ids = [tok(t, add_special_tokens=False).input_ids + [end] for t in texts]
    width = max(len(r) for r in ids)
    resp = torch.full((len(ids), width), pad, dtype=batch["input_ids"].dtype)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, r in enumerate(ids):
        resp[i, :len(r)] = torch.tensor(r, dtype=resp.dtype)
        mask[i, :len(r)] = 1
    return Rollout(torch.cat([batch["input_ids"], resp], dim=1), batch["attention_mask"], mask,
                   batch["pixel_values"], batch["image_grid_thw"], list(texts))


def token_kl(logits_p: torch.Tensor, logits_q: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p || q) per position over the last (vocabulary) axis, p and q given as logits."""
    logp = torch.log_softmax(logits_p.float() / temperature, dim=-1)
    logq = torch.log_softmax(logits_q.float() / temperature, dim=-1)
    return (logp.exp() * (logp - logq)).sum(dim=-1)


@torch.no_grad()
def kl_to_snapshot(model, processor, store, name: str, images: Sequence[Sequence], instructions: Sequence[str],
                   texts: Sequence[str], *, temperature: float = 1.0, batch_size: int = 16) -> dict:
    """Sums for KL(live policy || snapshot `name` of `store`) along `texts`: {"seq_sum", "tok_sum", "n_tok",
    "n_seq"} (sums, so that data-parallel shares add up; `kl_summary` turns them into means)."""
    out = {"seq_sum": 0.0, "tok_sum": 0.0, "n_tok": 0.0, "n_seq": 0.0}
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    for s in range(0, len(texts), batch_size):
        ro = encode_responses(processor, images[s:s + batch_size], instructions[s:s + batch_size],
                              texts[s:s + batch_size])
        ro = Rollout(*(x.to(device) for x in (ro.sequences, ro.prompt_mask, ro.response_mask, ro.pixel_values,
                                                ro.image_grid_thw)), ro.texts)
        live = response_logits(model, ro)
        with store.use(name):
            start = response_logits(model, ro)
        kl = token_kl(live, start, temperature) * ro.response_mask.float()
        out["seq_sum"] += float(kl.sum(dim=1).sum())
        out["tok_sum"] += float(kl.sum())
        out["n_tok"] += float(ro.response_mask.sum())
        out["n_seq"] += float(len(ro.texts))
    model.train(was)
    return out


def kl_summary(parts: Sequence[dict]) -> dict:
    """Means from the sums of one or more `kl_to_snapshot` results."""
    tot = {k: sum(p[k] for p in parts) for k in ("seq_sum", "tok_sum", "n_tok", "n_seq")}
    if not tot["n_seq"]:
        return {}
    return {"kl_start_seq": tot["seq_sum"] / tot["n_seq"], "kl_start_token": tot["tok_sum"] / max(tot["n_tok"], 1)}
