"""Top-p filtering with the exact result of transformers' `TopPLogitsWarper`, without its index sort on the CPU.

The warper sorts every row ascending (`torch.sort`, values and indices), takes softmax + cumsum of the sorted
values, removes the positions whose cumulative probability is <= 1 - top_p (a prefix, since the cumsum never
decreases), keeps the last `min_tokens_to_keep`, and scatters the decision back. On one CPU core `torch.sort`
of a [16, vocab] float matrix costs milliseconds per decoding step; numpy's sort of the values alone takes a
few per cent of that. The sorted values are the same whatever the algorithm, so softmax and cumsum here run on
the identical tensor and give identical bits. What the indices add is only the order of equal values: with k
positions removed and t the value at position k - 1, the warper removes exactly {scores <= t} unless t is tied
across the boundary (some copies of t removed, others kept); then the order torch.sort gives ties decides, and
this class calls the warper itself. NaN scores also go to the warper. Elsewhere than the CPU it always does.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import TopPLogitsWarper


class SortFreeTopP(TopPLogitsWarper):
    """`TopPLogitsWarper` whose CPU path sorts values only (module docstring); same outputs bit for bit."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.device.type != "cpu" or scores.dim() != 2 or scores.dtype not in (torch.float32, torch.float64):
            return super().__call__(input_ids, scores)
        values = torch.from_numpy(np.sort(scores.detach().numpy(), axis=-1))
        if bool(torch.isnan(values[:, -1]).any()):  # numpy sorts NaN last
            return super().__call__(input_ids, scores)
        cumulative = values.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - self.top_p)
        remove[..., -self.min_tokens_to_keep:] = False
        k = remove.sum(dim=-1, keepdim=True)  # removed positions per row (a prefix)
        t = values.gather(1, (k - 1).clamp(min=0))  # the largest removed value (meaningless where k = 0)
        below = scores <= t
        removing = k > 0
        if not bool((below.sum(dim=-1, keepdim=True)[removing] == k[removing]).all()):
            return super().__call__(input_ids, scores)  # t tied across the boundary: torch.sort's tie order decides
        return scores.masked_fill(below & removing, self.filter_value)
