"""The tiny preset: a real `Qwen2_5_VLForConditionalGeneration` built from a small config, an offline
byte-level BPE tokenizer trained on report text, and the real Qwen2.5-VL processor around it.

Nothing here is a toy code path: the tiny model is the same class as Qwen2.5-VL-7B, with the same special
tokens, chat format, 3-D (M-RoPE) positions, vision patching (14 px patches, 2x2 merge, 2 temporal frames)
and processor; only the sizes differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# Qwen2.5's special tokens in their original order; the vision ids in the model config point at these.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Our own Jinja template producing Qwen2.5-VL's chat layout:
#   <|im_start|>system\n...<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>text<|im_end|>\n
#   <|im_start|>assistant\n
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system{{ '\\n' }}You are a helpful assistant.<|im_end|>{{ '\\n' }}"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}{{ '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 1200):
    """Byte-level BPE trained on `corpus`, with Qwen2.5's special tokens appended at the end of the vocab."""
    # lazy: start-up cost (tokenizers, transformers)
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    if vocab_size <= 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} must exceed the 256 byte symbols plus special tokens")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    # Added here, in order, so their ids are consecutive as in Qwen2.5 (151643..151656 there).
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    fast = Qwen2TokenizerFast(
        tokenizer_object=tok,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    fast.add_special_tokens({"pad_token": "<|endoftext|>"})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_processor(tokenizer, image_size: int):
    """The real Qwen2.5-VL processor, pinned to one square image size (pixels = image_size^2)."""
    # lazy: start-up cost (transformers)
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessorFast
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    pixels = image_size * image_size
    image_processor = Qwen2VLImageProcessorFast(min_pixels=pixels, max_pixels=pixels)
    video_processor = Qwen2VLVideoProcessor(min_pixels=pixels, max_pixels=pixels)
    return Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=tokenizer.chat_template,
    )


def tiny_model_config(tokenizer, text_hidden: int = 64, text_layers: int = 2, vision_hidden: int = 32,
                      vision_depth: int = 1, image_size: int = 112):
    # lazy: start-up cost (transformers)
    from transformers import Qwen2_5_VLConfig

    heads = max(2, text_hidden // 16)
    head_dim = text_hidden // heads
    # M-RoPE splits head_dim/2 rotary frequencies over (time, height, width): the sections must sum to it.
    half = head_dim // 2
    mrope = [half - 2 * (half // 3), half // 3, half // 3]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    return Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=text_hidden,
            intermediate_size=2 * text_hidden,
            num_hidden_layers=text_layers,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            max_position_embeddings=1024,
            rope_theta=10000.0,
            rope_scaling={"type": "mrope", "mrope_section": mrope},
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            bos_token_id=ids["<|endoftext|>"],
        ),
        vision_config=dict(
            depth=vision_depth,
            hidden_size=vision_hidden,
            intermediate_size=2 * vision_hidden,
            num_heads=2,
            out_hidden_size=text_hidden,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=image_size,
            fullatt_block_indexes=list(range(vision_depth)),
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )


def build_tiny_model(tokenizer, seed: int = 0, attn_implementation: str = "eager", patch_embed: str = "conv",
                     **sizes):
    """A randomly initialised tiny Qwen2.5-VL (deterministic for `seed`), with transformers' attention kernels
    `attn_implementation` (model.attn_implementation) and the patch embedding `patch_embed`
    (pretrain.patch_embed, recorded in its config: harness/models/patch_embed.py)."""
    # lazy: start-up cost (transformers)
    from transformers import Qwen2_5_VLForConditionalGeneration

    # lazy: start-up cost (torch, transformers)
    from harness.models.init_order import reference_order_init
    from harness.models.patch_embed import use_patch_embed

    config = tiny_model_config(tokenizer, **sizes)
    config._attn_implementation = attn_implementation
    # transformers 5.x draws the same initial weights in another order: replayed in 4.57's (init_order.py)
    model = reference_order_init(lambda: Qwen2_5_VLForConditionalGeneration(config), seed)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.do_sample = False
    use_patch_embed(model, patch_embed)
    return model


def save_base(model, processor, out_dir: str | Path) -> Path:
    """Write a base-model folder in the Hugging Face layout that the 7B presets load from."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    return out
