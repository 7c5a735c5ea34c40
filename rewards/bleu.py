"""BLEU-4 reward: NLTK's smoothed sentence BLEU, computed for a whole batch at once.

`bleu4(candidates, references)[i]` equals

    nltk.translate.bleu_score.sentence_bleu([references[i].split()], candidates[i].split(),
                                            weights=(0.25,) * 4,
                                            smoothing_function=SmoothingFunction().method1)

(the official REVA-PO reward) up to float rounding (< 1e-12 in practice). NLTK's rules, reproduced here:

- modified precision p_n = clipped matches / max(1, number of candidate n-grams); a candidate shorter
  than n has no n-grams, so p_n = 0 / 1;
- if there is no unigram match at all, the score is 0 (NLTK returns before smoothing). This covers an
  empty candidate and an empty reference: both score 0, with no warning;
- method1 smoothing: a zero-match precision becomes 0.1 / denominator;
- brevity penalty with the single reference's length r and candidate length c: 1 if c > r, else
  exp(1 - r / c);
- score = BP * exp(sum_n 0.25 * log p_n).

How it is fast (all exact: words and n-grams are compared by exact integer codes, never by hashes alone):

1. Tokens. Every distinct text is tokenised once: in RL each reference is shared by the G candidates of
   its group, so references are de-duplicated first. ASCII text (the usual case) is split in numpy on the
   UTF-8 bytes, with exactly `str.split()`'s whitespace set. Each word's bytes are read as 64-bit chunks and
   coded by pandas' `factorize` (a C hash table that compares the values themselves); words longer than 8
   bytes get ids from their chunks' codes and their number of chunks. Other text goes through
   `str.split()` and a dict. Python never builds one string per token on the fast path.
2. N-grams. Each pair is laid out as "candidate, 3 pad ids, reference, 3 other pad ids", so that the 4
   words starting at any position are that text's next words, padded. One integer key per token,
   `pair | w0 w1 w2 w3 | side` (bit fields), is sorted once: equal n-grams of one pair are then contiguous
   for every order n at once, because an n-gram is a prefix of the 4-word window. Per order, runs of equal
   `pair | w0..w(n-1)` give candidate and reference counts, and the clipped match is their minimum (a window
   running past its text's end carries that side's pad id, so it never matches). When the keys would not
   fit in 63 bits (huge vocabularies), words are re-numbered per block of pairs and blocks are halved until
   they fit.
3. Blocks. Pairs are scored in blocks of about 56k characters: every temporary array then stays below
   glibc's mmap threshold and is recycled by the allocator. Larger blocks make fresh pages, and the page
   faults cost more than the per-block numpy calls they save. `python benchmarks/bench_bleu.py --block-chars
   N` on 2000 distinct pairs: 11.3 ms at 56k, 10.6 ms at 72k, 18.9 ms at 96k. Where that cliff falls depends
   on the process's allocation history (a bare timing loop hit it at 72k already), hence the margin.

Measured with `python benchmarks/bench_bleu.py` (2000 ~50-word pairs, one core): 22x NLTK on distinct
pairs, 26x on RL-shaped groups (G = 4); on batches of 256 pairs the fixed per-block cost brings it to 16-19x.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import pandas as pd

from rewards.registry import register_reward

MAX_ORDER = 4
SMOOTHING_EPSILON = 0.1  # NLTK SmoothingFunction().method1 default
_GAP = MAX_ORDER - 1  # zero ids after every text, so that a 4-word window never crosses into the next text
_KEY_BITS = 63  # bits of a non-negative int64 sort key
_VALUE_LIMIT = 1 << 62  # long-word values are re-coded before they could pass this (int64 overflow)
# Pairs are scored in blocks of about _BLOCK_CHARS characters (at most _CHUNK_PAIRS pairs): every temporary
# array then stays small (< 128 kB), cache-resident and recycled by the allocator, instead of being fresh
# pages from the OS on every call (thousands of page faults per batch otherwise, which cost more than the
# per-block numpy call overhead). 56k keeps a margin below that cliff (72k-96k on report text, see above).
_BLOCK_CHARS = 56_000
_CHUNK_PAIRS = 4096

# The characters `str.split()` splits on, within ASCII (what `str.isspace()` accepts there).
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20]] = True
# _LOW_BYTES[k] keeps the k lowest bytes of a little-endian uint64 (k = 0..8).
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)


def bleu4(candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per-pair smoothed BLEU-4 (NLTK method1, whitespace tokens, one reference per candidate)."""
    return _combine(*bleu_counts(candidates, references))


def bleu_counts(candidates: Sequence[str], references: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BLEU's integer statistics of each (candidate, reference) pair, whitespace tokens (`str.split()`):
    clipped n-gram matches [MAX_ORDER, n_pairs] (row k: n = k + 1), candidate lengths and reference lengths.
    Every BLEU variant with one reference per candidate is a function of these (NLTK's sentence BLEU here,
    pycocoevalcap's corpus BLEU in harness/scoring/coco_scores.py)."""
    if len(candidates) != len(references):
        raise ValueError(
            f"bleu4: {len(candidates)} candidates but {len(references)} references; they are scored in pairs"
        )
    n = len(candidates)
    matches = np.zeros((MAX_ORDER, n), dtype=np.int64)
    cand_len, ref_len = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for start, stop in _blocks(candidates, references):
        block = slice(start, stop)
        matches[:, block], cand_len[block], ref_len[block] = _count_block(candidates[block], references[block])
    return matches, cand_len, ref_len


def _blocks(candidates: Sequence[str], references: Sequence[str]) -> list[tuple[int, int]]:
    """Consecutive pair ranges of about _BLOCK_CHARS characters (and at most _CHUNK_PAIRS pairs) each.

    Also checks that every text is a `str`. A cut never separates rows that share a reference (an RL
    group), unless the group alone is too big.
    """
    n = len(candidates)
    chars = np.cumsum(np.fromiter(map(len, map(_as_str, candidates)), dtype=np.int64, count=n))
    chars += np.cumsum(np.fromiter(map(len, map(_as_str, references)), dtype=np.int64, count=n))
    blocks, start = [], 0
    while start < n:
        budget = (chars[start - 1] if start else 0) + _BLOCK_CHARS
        stop = max(min(int(np.searchsorted(chars, budget, side="right")), start + _CHUNK_PAIRS, n), start + 1)
        limit = min(n, stop + _CHUNK_PAIRS)
        while stop < limit and references[stop] == references[stop - 1]:
            stop += 1
        blocks.append((start, stop))
        start = stop
    return blocks


def _count_block(candidates: Sequence[str], references: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clipped n-gram matches [MAX_ORDER, n_pairs], candidate lengths and reference lengths of a block."""
    n_pairs = len(candidates)
    # Distinct references, in order of appearance: RL batches repeat each one G times.
    slot: dict[str, int] = {}
    ref_slot = np.fromiter((slot.setdefault(r, len(slot)) for r in references), dtype=np.int64, count=n_pairs)
    ids, lengths, vocab_size = _tokenize([*candidates, *slot])
    starts = np.cumsum(lengths) - lengths
    cand_len, ref_len = lengths[:n_pairs], lengths[n_pairs:][ref_slot]
    # Segments 2p (candidate of pair p) and 2p + 1 (its reference): where their ids start, how many.
    seg_start = np.empty(2 * n_pairs, dtype=np.int64)
    seg_start[0::2], seg_start[1::2] = starts[:n_pairs], starts[n_pairs:][ref_slot]
    seg_len = np.empty(2 * n_pairs, dtype=np.int64)
    seg_len[0::2], seg_len[1::2] = cand_len, ref_len
    return _clipped_matches(ids, seg_start, seg_len, vocab_size), cand_len, ref_len


def _as_str(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"bleu4 expects strings, got {type(text).__name__}")
    return text


# ---------------------------------------------------------------------------------------------- tokens


def _tokenize(texts: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """Word ids (1..vocab_size, exact) of all texts end to end, and the number of words of each text."""
    joined = " ".join(texts)
    if joined.isascii() and "\x00" not in joined:
        return _tokenize_ascii(joined, texts)
    return _tokenize_python(texts)


def _tokenize_python(texts: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    token_lists = [text.split() for text in texts]
    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
    # A defaultdict backed by a counter assigns dense ids (from 1) in C, without a Python-level loop.
    vocab: defaultdict[str, int] = defaultdict(itertools.count(1).__next__)
    words = itertools.chain.from_iterable(token_lists)
    ids = np.fromiter(map(vocab.__getitem__, words), dtype=np.int64, count=int(lengths.sum()))
    return ids, lengths, len(vocab)


def _tokenize_ascii(joined: str, texts: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """`str.split()` of every text, done on the bytes of " ".join(texts) (ASCII without NUL bytes)."""
    buf = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    in_word = np.zeros(len(buf) + 2, dtype=bool)
    np.greater(buf, 0x20, out=in_word[1:-1])  # every byte above the space is a word byte in ASCII
    if np.any(buf < 0x20):  # control bytes: whitespace ("\t", "\n", ...) or word bytes ("\x01", ...)
        control = np.flatnonzero(buf < 0x20)
        in_word[control + 1] = ~_ASCII_SPACE[buf[control]]
    edges = np.flatnonzero(in_word[1:] != in_word[:-1])  # alternately a word's first byte and its end
    word_start, word_len = edges[0::2], edges[1::2] - edges[0::2]
    # Text k spans characters (= bytes) [offset_k, offset_k + len_k) of the joined string.
    text_len = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    text_offset = np.cumsum(text_len + 1) - (text_len + 1)
    first_word = np.searchsorted(word_start, text_offset)
    lengths = np.diff(first_word, append=len(word_start))
    ids, vocab_size = _word_ids(buf, word_start, word_len)
    return ids, lengths, vocab_size


def _word_ids(buf: np.ndarray, word_start: np.ndarray, word_len: np.ndarray) -> tuple[np.ndarray, int]:
    """Exact ids of words given by byte ranges: equal ids if and only if equal bytes.

    A word's bytes are read 8 at a time into little-endian uint64 "chunks" (bytes past the word are masked
    to 0; words hold no NUL byte, so the zeros are unambiguous). All chunks of all words get dense codes
    0..K-1 from one factorize. A word of up to 8 bytes has one chunk: its id is its code + 1. A longer
    word's id comes from its number of chunks and the base-K number made of its chunks' codes (c0, c1, ...),
    which together determine the word (the last chunk's zero padding fixes the exact length); those pairs
    are re-coded densely above K, so a long word can never share an id with a short one.
    Ids are therefore exact but not always dense (codes used only by later chunks leave gaps).
    """
    padded = np.zeros(len(buf) + 8, dtype=np.uint8)
    padded[: len(buf)] = buf
    # The 8 bytes starting at every offset, as one (unaligned, overlapping) little-endian uint64 view.
    eight = np.ndarray(shape=(len(buf),), dtype="<u8", buffer=padded, strides=(1,))
    n_words = len(word_start)
    extra = (word_len - 1) >> 3  # chunks after the first
    long_words = np.flatnonzero(extra)
    if len(long_words) == 0:
        codes = _dense_codes(np.take(eight, word_start) & _LOW_BYTES[np.minimum(word_len, 8)])
        return codes + 1, int(codes.max(initial=-1)) + 1
    # Chunk j >= 1 of every long word, word by word: the word's index, and j.
    n_extra = extra[long_words]
    first_extra = np.cumsum(n_extra) - n_extra
    owner = np.repeat(long_words, n_extra)
    level = np.arange(len(owner), dtype=np.int64) - np.repeat(first_extra, n_extra) + 1
    starts = np.concatenate((word_start, word_start[owner] + 8 * level))
    nbytes = np.concatenate((word_len, word_len[owner] - 8 * level))
    codes = _dense_codes(np.take(eight, starts) & _LOW_BYTES[np.minimum(nbytes, 8)])
    n_codes = int(codes.max()) + 1
    ids = codes[:n_words] + 1
    # Horner's rule over the long words' chunk codes, one chunk position at a time: words with the same
    # number of chunks then have equal values exactly when they are equal, and keying on (value, number of
    # chunks) at the end tells the others apart. Values are re-coded densely (which keeps them distinct)
    # whenever the next step or that final key could overflow int64 (only for words of many chunks).
    value, bound = codes[long_words], n_codes
    extra_codes = codes[n_words:]
    most = int(n_extra.max())
    for j in range(1, most + 1):
        if bound * n_codes * (most + 1) >= _VALUE_LIMIT:
            value = _dense_codes(value)
            bound = int(value.max()) + 1
        reaching = np.flatnonzero(n_extra >= j)
        value[reaching] = value[reaching] * n_codes + extra_codes[first_extra[reaching] + j - 1]
        bound *= n_codes
    long_ids = _dense_codes(value * (most + 1) + n_extra)
    ids[long_words] = long_ids + n_codes + 1
    return ids, n_codes + int(long_ids.max()) + 1


def _dense_codes(values: np.ndarray) -> np.ndarray:
    """Dense codes 0..k-1 of the k distinct values (in order of first appearance), as int64.

    pandas' factorize looks every value up in a C hash table that compares the values themselves, so the
    codes are exact; it is 2-3x faster than ranking by argsort.
    """
    return pd.factorize(values)[0].astype(np.int64, copy=False)


# ------------------------------------------------------------------------------------------- n-grams


def _clipped_matches(ids: np.ndarray, seg_start: np.ndarray, seg_len: np.ndarray, vocab_size: int) -> np.ndarray:
    """Clipped n-gram match counts [MAX_ORDER, n_pairs] for segments 2p (candidate) and 2p + 1 (reference)."""
    n_pairs = len(seg_start) // 2
    matches = np.zeros((MAX_ORDER, n_pairs), dtype=np.int64)
    _match_block(ids, seg_start, seg_len, vocab_size, 0, n_pairs, matches, renumbered=False)
    return matches


def _match_block(
    ids: np.ndarray,
    seg_start: np.ndarray,
    seg_len: np.ndarray,
    vocab_size: int,
    lo: int,
    hi: int,
    out: np.ndarray,
    *,
    renumbered: bool,
) -> None:
    """Fill out[:, lo:hi]; renumber words or halve the block when the sort keys would not fit in 63 bits."""
    n_pairs = hi - lo
    ref_pad = vocab_size + 1  # the id after every reference (candidates get 0): see _layout
    layout, token_pos = _layout(ids, seg_start[2 * lo : 2 * hi], seg_len[2 * lo : 2 * hi], ref_pad)
    word_bits = ref_pad.bit_length()
    if MAX_ORDER * word_bits + 1 + max(n_pairs - 1, 1).bit_length() <= _KEY_BITS:
        out[:, lo:hi] = _count_matches(layout, token_pos, seg_len[2 * lo : 2 * hi], word_bits)
        return
    if not renumbered:  # a block's own words are far fewer than the batch's: number them 1..V_block
        block_ids = _dense_codes(layout[token_pos]) + 1
        local_start = np.cumsum(seg_len[2 * lo : 2 * hi]) - seg_len[2 * lo : 2 * hi]
        block_start = np.zeros_like(seg_start)
        block_start[2 * lo : 2 * hi] = local_start
        _match_block(block_ids, block_start, seg_len, int(block_ids.max(initial=0)), lo, hi, out, renumbered=True)
        return
    if n_pairs == 1:  # one pair with ~32k distinct words: count it in Python
        cand = ids[seg_start[2 * lo] : seg_start[2 * lo] + seg_len[2 * lo]].tolist()
        ref = ids[seg_start[2 * lo + 1] : seg_start[2 * lo + 1] + seg_len[2 * lo + 1]].tolist()
        out[:, lo] = _count_matches_python(cand, ref)
        return
    mid = (lo + hi) // 2
    _match_block(ids, seg_start, seg_len, vocab_size, lo, mid, out, renumbered=False)
    _match_block(ids, seg_start, seg_len, vocab_size, mid, hi, out, renumbered=False)


def _layout(
    ids: np.ndarray, seg_start: np.ndarray, seg_len: np.ndarray, ref_pad: int
) -> tuple[np.ndarray, np.ndarray]:
    """Segments' ids end to end, each followed by _GAP pad ids; and the position of every token in it.

    Candidates (even segments) are padded with 0 and references with `ref_pad`, an id no word has. A
    window running past its text's end therefore never equals a window of the other side, so it can never
    count as a match: the counting needs no validity check.
    """
    n_tokens = int(seg_len.sum())
    span = seg_len + _GAP
    out_start = np.cumsum(span) - span
    first = np.cumsum(seg_len) - seg_len
    within = np.arange(n_tokens, dtype=np.int64)
    token_pos = within + np.repeat(out_start - first, seg_len)
    layout = np.zeros(int(span.sum()), dtype=np.int64)
    layout[token_pos] = ids[within + np.repeat(seg_start - first, seg_len)]
    ref_gap = (out_start[1::2] + seg_len[1::2])[:, None] + np.arange(_GAP)
    layout[ref_gap] = ref_pad
    return layout, token_pos


def _count_matches(layout: np.ndarray, token_pos: np.ndarray, seg_len: np.ndarray, bits: int) -> np.ndarray:
    """Clipped matches per order and pair from one sort of `pair | w0 w1 w2 w3 | side` keys."""
    n_pairs = len(seg_len) // 2
    matches = np.zeros((MAX_ORDER, n_pairs), dtype=np.int64)
    if len(token_pos) == 0:
        return matches
    window = layout[: len(layout) - _GAP]
    for k in range(1, MAX_ORDER):
        window = (window << bits) | layout[k : len(layout) - _GAP + k]
    # Segment s = 2 * pair + side is exactly `pair << (4 * bits + 1) | side` in the key's top and bottom bits.
    pair_shift = MAX_ORDER * bits + 1
    seg = np.arange(len(seg_len), dtype=np.int64)
    seg_tag = ((seg >> 1) << pair_shift) | (seg & 1)
    keys = np.sort(np.repeat(seg_tag, seg_len) | (window[token_pos] << 1))
    # refs_before[i]: reference tokens among keys[:i] (side bit 1 = reference).
    refs_before = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(keys & 1, out=refs_before[1:])
    # change[i] (1 <= i < len(keys)): keys[i - 1] ^ keys[i], whose highest set bit tells which field the two
    # first differ in; both ends are "different in every field", so that every run has two bounds below.
    change = np.empty(len(keys) + 1, dtype=np.int64)
    change[0] = change[-1] = np.iinfo(np.int64).max
    np.bitwise_xor(keys[1:], keys[:-1], out=change[1:-1])
    for order in range(1, MAX_ORDER + 1):
        # keys >> shift == pair | w0 .. w(order-1); run j of equal such prefixes is keys[bounds[j] : bounds[j + 1]].
        shift = 1 + (MAX_ORDER - order) * bits
        bounds = np.flatnonzero(change >= (1 << shift))
        refs_upto = refs_before[bounds]
        refs = refs_upto[1:] - refs_upto[:-1]
        cands = (bounds[1:] - bounds[:-1]) - refs
        # Windows past a text's end are padded differently on the two sides (see _layout): no false match.
        clipped = np.minimum(cands, refs)
        run_pair = keys[bounds[:-1]] >> pair_shift
        np.add.at(matches[order - 1], run_pair, clipped)
    return matches


def _count_matches_python(cand: list[int], ref: list[int]) -> np.ndarray:
    counts = []
    for n in range(1, MAX_ORDER + 1):
        c = Counter(zip(*(cand[k:] for k in range(n)), strict=False))
        r = Counter(zip(*(ref[k:] for k in range(n)), strict=False))
        counts.append(sum((c & r).values()))
    return np.array(counts, dtype=np.int64)


# --------------------------------------------------------------------------------------------- score


def _combine(matches: np.ndarray, cand_len: np.ndarray, ref_len: np.ndarray) -> np.ndarray:
    """Smoothed geometric mean of the precisions times the brevity penalty, as NLTK computes it."""
    orders = np.arange(1, MAX_ORDER + 1)[:, None]
    denominators = np.maximum(1, cand_len[None, :] - orders + 1).astype(np.float64)
    numerators = np.where(matches > 0, matches.astype(np.float64), SMOOTHING_EPSILON)
    log_precision = np.log(numerators / denominators)
    geometric = np.exp(np.sum(0.25 * log_precision, axis=0))
    scored = matches[0] > 0  # NLTK returns 0 when no unigram matches (empty candidate or reference too)
    safe_len = np.maximum(cand_len, 1)
    brevity = np.where(cand_len > ref_len, 1.0, np.exp(1.0 - ref_len / safe_len))
    return np.where(scored, brevity * geometric, 0.0)


@register_reward("bleu4")
def bleu4_reward(candidates: list[str], references: list[str], **_) -> np.ndarray:
    """REVA-PO's reward: sentence BLEU-4 of the whitespace-split candidate against the cleaned reference."""
    return bleu4(candidates, references)
