#!/usr/bin/python3
"""train_bpe.py: trains a small GPT-2/RoBERTa-style byte-level BPE vocabulary and writes it
in the three formats bt's tokenizer reads (src/data/tokenizer.h):
  vocab.json      {token: id}
  merges.txt      "#version: 0.2" then one "left right" pair per line, in rank order
  tokenizer.json  Hugging Face tokenizers' serialization: BPE model (vocab + merges as
                  "left right" strings), ByteLevel pre-tokenizer and decoder,
                  RobertaProcessing post-processor, and the added tokens.
Ids: <s> 0, <pad> 1, </s> 2, <unk> 3, then the 256 byte symbols in byte order, then one id
per new merged token in merge order, then <mask> last (lstrip=true), as in RoBERTa where
<mask> is the final id.

Training: the corpus (UTF-8 text, one document per line) is split with the GPT-2 pattern,
each piece is mapped through GPT-2's bytes_to_unicode table, and pieces are counted. Each
step merges the most frequent adjacent pair (counted over all pieces, weighted by piece
frequency); ties go to the lexicographically smallest pair, so the output is deterministic.
Training stops after --merges merges or when the most frequent pair occurs fewer than
--min-frequency times (default 2). A merge whose
result already exists (another merge built the same string) reuses that id, as HF's
trainer does.

Deliberately not here: speed (this recounts all pairs every step; fine for a few thousand
merges on a small corpus), min_frequency / limit_alphabet options, any normalizer.

Used by: tests/fixtures/tokenizer (committed output) and the synthetic dataset generator.
Run: /usr/bin/python3 scripts/train_bpe.py --corpus FILE --merges N --out DIR
"""
import argparse
import collections
import json
import os
import sys

import regex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_byte_level import GPT2_PATTERN, bytes_to_unicode  # noqa: E402

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def train(lines, num_merges, min_frequency=2):
    enc = bytes_to_unicode()
    pat = regex.compile(GPT2_PATTERN)
    counts = collections.Counter()
    for line in lines:
        for piece in pat.findall(line):
            counts["".join(enc[b] for b in piece.encode("utf-8"))] += 1
    words = [(list(w), c) for w, c in counts.items()]
    vocab = {}
    for t in SPECIALS:
        vocab[t] = len(vocab)
    for b in range(256):
        vocab[enc[b]] = len(vocab)
    merges = []
    while len(merges) < num_merges:
        pairs = collections.Counter()
        for syms, c in words:
            for i in range(len(syms) - 1):
                pairs[(syms[i], syms[i + 1])] += c
        if not pairs:
            break
        best_count = max(pairs.values())
        if best_count < min_frequency:
            break
        best = min(p for p, c in pairs.items() if c == best_count)
        merges.append(best)
        new = best[0] + best[1]
        if new not in vocab:
            vocab[new] = len(vocab)
        for syms, _ in words:
            i = 0
            while i < len(syms) - 1:
                if syms[i] == best[0] and syms[i + 1] == best[1]:
                    syms[i:i + 2] = [new]
                i += 1
    vocab["<mask>"] = len(vocab)
    return vocab, merges


def write(out_dir, vocab, merges):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    added = [{"id": vocab[c], "content": c, "single_word": False, "lstrip": c == "<mask>",
              "rstrip": False, "normalized": c != "<mask>", "special": True}
             for c in SPECIALS + ["<mask>"]]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", vocab["</s>"]],
                           "cls": ["<s>", vocab["<s>"]], "trim_offsets": True,
                           "add_prefix_space": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab,
                  "merges": [f"{a} {b}" for a, b in merges]},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", required=True, help="UTF-8 text file, one document per line")
    p.add_argument("--merges", type=int, default=400)
    p.add_argument("--min-frequency", type=int, default=2,
                   help="stop when the most frequent pair occurs fewer times than this")
    p.add_argument("--out", required=True, help="output directory")
    a = p.parse_args()
    with open(a.corpus, encoding="utf-8") as f:
        lines = [ln.rstrip("\n") for ln in f]
    vocab, merges = train(lines, a.merges, a.min_frequency)
    write(a.out, vocab, merges)
    print(f"wrote {a.out}: {len(vocab)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
