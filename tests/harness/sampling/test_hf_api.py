"""harness/sampling/hf_api.py: generate's first-step inputs under each transformers version's signature.

The signatures below are those of `Qwen2_5_VLForConditionalGeneration.prepare_inputs_for_generation` in 4.57.6,
5.20.2 and 5.25.0 (checked by inspect.signature), so the test does not depend on the installed version.
"""

from __future__ import annotations

import pytest
import torch

from harness.sampling.hf_api import cache_kwargs, first_step_inputs


class _V457:
    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, inputs_embeds=None,
                                      cache_position=None, position_ids=None, use_cache=True, pixel_values=None,
                                      pixel_values_videos=None, image_grid_thw=None, video_grid_thw=None,
                                      second_per_grid_ts=None, **kwargs):
        return {"past_key_values": past_key_values, "cache_position": cache_position, **kwargs}


class _V520:
    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, past_key_values=None,
                                      attention_mask=None, inputs_embeds=None, is_first_iteration=False, **kwargs):
        return {"past_key_values": past_key_values, "is_first_iteration": is_first_iteration, **kwargs}


class _V525:
    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, cache=None, attention_mask=None,
                                      inputs_embeds=None, is_first_iteration=False, **kwargs):
        return {"cache": cache, "is_first_iteration": is_first_iteration, **kwargs}


@pytest.mark.parametrize("model,cache_name,first_flag", [(_V457(), "past_key_values", False),
                                                         (_V520(), "past_key_values", True),
                                                         (_V525(), "cache", True)])
def test_first_step_inputs_name_the_cache_and_the_first_step_as_each_version_does(model, cache_name, first_flag):
    """5.20 names the cache `past_key_values` as 4.57 did, but tells the first step by `is_first_iteration` (without
    it the images are left out of the first step); 4.57 tells it by `cache_position`."""
    ids = torch.zeros(2, 5, dtype=torch.long)
    cache = object()
    got = first_step_inputs(model, ids, torch.ones_like(ids), cache, 1)
    assert got[cache_name] is cache
    assert got.get("is_first_iteration", False) is first_flag
    assert ("cache_position" in got) is (not first_flag)
    if "cache_position" in got:
        assert torch.equal(got["cache_position"], torch.arange(5))


def test_cache_kwargs_follow_the_forward_signature():
    class Old(torch.nn.Module):
        def forward(self, hidden_states, past_key_values=None, cache_position=None):
            pass

    class New(torch.nn.Module):
        def forward(self, hidden_states, cache=None):
            pass

    position = torch.arange(3)
    assert set(cache_kwargs(Old(), "c", position)) == {"past_key_values", "cache_position"}
    assert cache_kwargs(New(), "c", position) == {"cache": "c"}
