"""f1chexbert 0.0.2 and radgraph 0.1.18 on transformers 5.x: the one place their 4.x tokenizer calls are kept working.

Both packages call ``tokenizer.encode_plus``, which transformers 5.0 removed (f1chexbert:
``f1chexbert/f1chexbert.py: tokenize``; radgraph: ``radgraph/allennlp/data/tokenizers/
pretrained_transformer_tokenizer.py``). ``install()`` restores it, only where it is missing, so on transformers 4.x
it changes nothing:

- ``PreTrainedTokenizerBase.encode_plus``: 4.x's ``encode_plus`` of one sequence (or one pair) is 4.x's
  ``__call__`` of the same single input with the same keywords, which 5.x's ``__call__`` still computes; the one
  input 5.x reads differently is a list of tokens (f1chexbert passes ``tokenizer.tokenize(report)``): 4.x's slow
  tokenizers map it with ``convert_tokens_to_ids`` and add the special tokens, 5.x's ``__call__`` takes a list of
  strings for a batch. ``encode_plus`` below does the 4.x mapping itself (ids, then ``__call__``, which adds the
  special tokens to a list of ids on 5.x's Python tokenizers).
- f1chexbert's ``BertTokenizer``: in 4.x that name was the pure-Python WordPiece tokenizer; 5.x gives the name to
  the ``tokenizers``-backed one (which cannot add special tokens to a list of ids) and keeps the 4.x class as
  ``BertTokenizerLegacy`` (the same code). f1chexbert's module-level name is pointed at it, so its reports are
  tokenised exactly as under 4.x.
- ``BertTokenizer.build_inputs_with_special_tokens`` (the ``tokenizers``-backed class radgraph gets from
  ``AutoTokenizer``; 4.x's ``BertTokenizerFast`` had it and radgraph's ``PretrainedTransformerIndexer`` calls it on
  each 512-piece segment): 4.x's definition, ``[CLS] a [SEP]`` and ``[CLS] a [SEP] b [SEP]``.

tests/rewards/test_hf_compat.py checks the tokens, CheXbert labels and RadGraph F1s against values computed with
transformers 4.57.6 on the same stand-in weights.
"""

from __future__ import annotations

import threading

_LOCK = threading.Lock()


def _is_token_list(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(t, str) for t in value)


def encode_plus(self, text, text_pair=None, add_special_tokens: bool = True, **kwargs):
    """transformers 4.x's ``encode_plus`` for one sequence or pair (see the module docstring)."""
    if not kwargs.get("is_split_into_words"):
        if _is_token_list(text):
            text = self.convert_tokens_to_ids(list(text))
        if _is_token_list(text_pair):
            text_pair = self.convert_tokens_to_ids(list(text_pair))
    return self(text, text_pair, add_special_tokens=add_special_tokens, **kwargs)


def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
    """transformers 4.x's ``BertTokenizerFast.build_inputs_with_special_tokens``."""
    output = [self.cls_token_id] + list(token_ids_0) + [self.sep_token_id]
    if token_ids_1 is not None:
        output += list(token_ids_1) + [self.sep_token_id]
    return output


def install() -> None:
    """Restore what the two packages need on transformers 5.x; a no-op on 4.x and when already installed."""
    # lazy: start-up cost (transformers)
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    with _LOCK:
        if not hasattr(PreTrainedTokenizerBase, "encode_plus"):
            PreTrainedTokenizerBase.encode_plus = encode_plus
        if PreTrainedTokenizerBase.encode_plus is not encode_plus:
            return  # transformers 4.x: its own encode_plus and its own (slow) BertTokenizer
        # lazy: start-up cost (f1chexbert, transformers)
        from f1chexbert import f1chexbert as chexbert_package
        from transformers.models.bert.tokenization_bert import BertTokenizer
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

        chexbert_package.BertTokenizer = BertTokenizerLegacy
        if not hasattr(BertTokenizer, "build_inputs_with_special_tokens"):
            BertTokenizer.build_inputs_with_special_tokens = build_inputs_with_special_tokens
