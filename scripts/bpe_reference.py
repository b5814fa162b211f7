#!/usr/bin/python3
"""bpe_reference.py: an independent reference for bt's RoBERTa byte-level BPE tokenizer
(src/data/tokenizer.c), written from the published GPT-2 encoder algorithm and the Hugging
Face tokenizers pipeline semantics, sharing no code with the C implementation.

Pipeline (as RobertaTokenizerFast / tokenizer.json behaves):
  1. Text is Unicode. Bytes that are not valid UTF-8 are decoded with Python's
     bytes.decode("utf-8", "replace") (one U+FFFD per maximal invalid subpart), which is
     what a caller of the HF tokenizer would have to do first.
  2. Added tokens are split out before pre-tokenization: leftmost-longest matching, first
     over the tokens with normalized=false, then over the remaining pieces with the
     normalized=true tokens (there is no normalizer). A token with lstrip=true also takes
     the whitespace (regex \\s) to its left, but not past the end of the previous match;
     rstrip likewise to its right.
  3. Each remaining piece is split with the GPT-2 pattern (the `regex` module, Unicode
     \\p{L} \\p{N} \\s), each piece's UTF-8 bytes are mapped through GPT-2's
     bytes_to_unicode table, and BPE merges are applied as in GPT-2's encoder.py: find the
     adjacent pair with the lowest merge rank, merge every occurrence of it left to right,
     repeat until no pair has a rank.
  4. Templates: single <s> A </s>; pair <s> A </s></s> B </s>. Truncation as the Rust
     tokenizers' truncate_encodings with LongestFirst, applied to max_length minus the
     number of special tokens (2 single, 4 pair). Padding on the right with <pad>, mask 0.
  5. Decode: ids -> token strings (special ones dropped when asked), characters mapped
     back to bytes (a token with a character outside the byte alphabet contributes its raw
     UTF-8), then bytes.decode("utf-8", "replace").

Deliberately not here: offsets, stride/overflowing tokens, dropout, normalizers, any other
pre-tokenizer. No caching (speed is irrelevant here).

Usage:
  bpe_reference.py selftest
  bpe_reference.py cases --model-dir DIR --inputs INPUTS.json --out CASES.json
  bpe_reference.py encode --model-dir DIR "some text"
  bpe_reference.py bench --model-dir DIR --captions FILE   (timing, see bench_tokenizer.c)

Hand-checked cross-check of the algorithm itself (run by `selftest`):
  bytes_to_unicode: byte 0x20 -> U+0120 'Ġ', 0x0A -> U+010A 'Ċ', 0x09 -> U+0109 'ĉ',
  0x00 -> U+0100 'Ā', 0x7F -> U+0121 'ġ', 0xA0 -> U+0142 'ł', 0xAD -> U+0143 'Ń'
  (so U+00A0 no-break space, UTF-8 C2 A0, is the two symbols 'Â' 'ł' as in roberta-base).
  Tiny vocabulary, merges in rank order: (a, b) (Ġ, a) (Ġa, b) (b, b):
    "abb ab"  -> pieces "abb", " ab" -> "a b b" -> merge (a,b) -> "ab b"; (b,b) cannot apply
              (the second b was consumed) -> [ab, b];  "Ġab": (a,b) rank 0 first -> "Ġ ab",
              (Ġ, ab) has no rank -> [Ġ, ab]   (NOT "Ġa b": rank decides, not position)
    "bbb"     -> (b,b) left to right, non-overlapping -> [bb, b]
"""
import json
import os
import sys

import regex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_byte_level import GPT2_PATTERN, bytes_to_unicode  # noqa: E402

PAT = regex.compile(GPT2_PATTERN)
TRAILING_SPACE = regex.compile(r"\s*$")
LEADING_SPACE = regex.compile(r"^\s*")
BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}


def get_pairs(word):
    return {(word[i], word[i + 1]) for i in range(len(word) - 1)}


class Reference:
    def __init__(self, vocab, merges, added):
        """vocab: {token: id}; merges: [(a, b)] in rank order; added: list of dicts with
        content, id, lstrip, rstrip, normalized, special."""
        self.vocab = vocab
        self.ranks = {}
        for i, m in enumerate(merges):
            self.ranks[tuple(m)] = i  # a duplicate keeps the later rank, as HF's map does
        self.added = added
        self.id_to_token = {i: t for t, i in vocab.items()}
        for a in added:
            self.id_to_token[a["id"]] = a["content"]
        self.special_ids = {a["id"] for a in added if a.get("special", True)}
        self.unk_id = vocab.get("<unk>")
        self.cls_id, self.sep_id, self.pad_id = vocab["<s>"], vocab["</s>"], vocab["<pad>"]

    @classmethod
    def load(cls, model_dir):
        tj = os.path.join(model_dir, "tokenizer.json")
        if os.path.exists(tj):
            with open(tj, encoding="utf-8") as f:
                d = json.load(f)
            m = d["model"]
            merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x)
                      for x in m["merges"]]
            return cls(m["vocab"], merges, d.get("added_tokens", []))
        with open(os.path.join(model_dir, "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        merges = []
        with open(os.path.join(model_dir, "merges.txt"), encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("#version") or not line:
                    continue
                merges.append(tuple(line.split(" ")))
        added = [{"content": c, "id": vocab[c], "lstrip": c == "<mask>", "rstrip": False,
                  "normalized": c != "<mask>", "special": True}
                 for c in ("<s>", "<pad>", "</s>", "<unk>", "<mask>") if c in vocab]
        return cls(vocab, merges, added)

    # --- BPE, as GPT-2's encoder.py ---------------------------------------------------
    def bpe(self, token):
        word = tuple(token)
        pairs = get_pairs(word)
        while pairs:
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        return list(word)

    def encode_plain(self, text):
        ids = []
        for piece in PAT.findall(text):
            mapped = "".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
            for tok in self.bpe(mapped):
                if tok in self.vocab:
                    ids.append(self.vocab[tok])
                elif self.unk_id is not None:
                    ids.append(self.unk_id)  # only a single byte symbol can be missing
        return ids

    # --- added tokens ------------------------------------------------------------------
    def split_added(self, text, tokens):
        """[(id or None, substring)] covering text; leftmost-longest matches of tokens."""
        out = []
        start_offset = 0
        pos = 0
        while pos < len(text):
            best = None
            for i in range(pos, len(text)):
                for t in tokens:
                    c = t["content"]
                    longer = best is None or len(c) > len(best[1]["content"])
                    if c and text.startswith(c, i) and longer:
                        best = (i, t)
                if best is not None:
                    break
            if best is None:
                break
            start, tok = best
            stop = start + len(tok["content"])
            pos = stop  # the matcher resumes after the token itself, not after any strip
            if tok.get("lstrip"):
                newstart = TRAILING_SPACE.search(text[:start]).start()
                start = max(newstart, start_offset)
            if tok.get("rstrip"):
                stop += LEADING_SPACE.match(text[stop:]).end()
            if start_offset < start:
                out.append((None, text[start_offset:start]))
            out.append((tok["id"], text[start:stop]))
            start_offset = stop
        if start_offset < len(text):
            out.append((None, text[start_offset:]))
        return out

    def encode(self, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        ids = []
        first = [t for t in self.added if not t.get("normalized", False)]
        second = [t for t in self.added if t.get("normalized", False)]
        for tid, piece in self.split_added(text, first):
            if tid is not None:
                ids.append(tid)
                continue
            for tid2, piece2 in self.split_added(piece, second):
                if tid2 is not None:
                    ids.append(tid2)
                else:
                    ids.extend(self.encode_plain(piece2))
        return ids

    # --- templates -----------------------------------------------------------------------
    def encode_template(self, a, b=None, max_length=None, truncate=False, pad=False):
        ia = self.encode(a)
        ib = self.encode(b) if b is not None else None
        if truncate:
            n_special = 2 if ib is None else 4
            limit = max_length - n_special
            assert limit >= 0
            if ib is None:
                ia = ia[:limit]
            elif len(ia) + len(ib) > limit:
                n1, n2 = len(ia), len(ib)
                swap = n1 > n2
                if swap:
                    n1, n2 = n2, n1
                n2 = n1 if n1 > limit else max(n1, limit - n1)
                if n1 + n2 > limit:
                    n1 = limit // 2
                    n2 = n1 + limit % 2
                if swap:
                    n1, n2 = n2, n1
                ia, ib = ia[:n1], ib[:n2]
        ids = [self.cls_id] + ia + [self.sep_id]
        if ib is not None:
            ids += [self.sep_id] + ib + [self.sep_id]
        mask = [1] * len(ids)
        if pad and max_length is not None and len(ids) < max_length:
            k = max_length - len(ids)
            ids += [self.pad_id] * k
            mask += [0] * k
        return ids, mask

    def decode(self, ids, skip_special=False):
        out = bytearray()
        for i in ids:
            if skip_special and i in self.special_ids:
                continue
            tok = self.id_to_token[i]
            if all(c in BYTE_DECODER for c in tok):
                out.extend(BYTE_DECODER[c] for c in tok)
            else:
                out.extend(tok.encode("utf-8"))
        return out.decode("utf-8", "replace")


def selftest():
    e = BYTE_ENCODER
    assert len(set(e.values())) == 256
    for b, cp in ((0x20, 0x120), (0x0A, 0x10A), (0x09, 0x109), (0x00, 0x100), (0x7F, 0x121),
                  (0xA0, 0x142), (0xAD, 0x143), (ord("a"), ord("a")), (0xE9, 0xE9)):
        assert e[b] == chr(cp), (hex(b), hex(ord(e[b])))
    # GPT-2 pattern, hand-split.
    assert PAT.findall("I'm 3.14 don't  stop!!\n") == \
        ["I", "'m", " 3", ".", "14", " don", "'t", " ", " stop", "!!", "\n"]
    assert PAT.findall("I'M a  b\t\tc ") == ["I", "'", "M", " a", " ", " b", "\t", "\t", "c", " "]
    assert PAT.findall("日本語 x²") == ["日本語", " x", "²"]
    vocab = {t: i for i, t in enumerate(
        ["<s>", "<pad>", "</s>", "<unk>", "a", "b", "Ġ", "ab", "Ġa", "Ġab", "bb", "<mask>"])}
    ref = Reference(vocab, [("a", "b"), ("Ġ", "a"), ("Ġa", "b"), ("b", "b")],
                    [{"content": c, "id": vocab[c], "lstrip": c == "<mask>", "special": True}
                     for c in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")])
    assert ref.bpe("abb") == ["ab", "b"]
    assert ref.bpe("Ġab") == ["Ġ", "ab"]
    assert ref.bpe("bbb") == ["bb", "b"]
    assert ref.encode("abb ab") == [7, 5, 6, 7]
    assert ref.encode("a  <mask>b") == [4, 11, 5]       # lstrip takes both spaces
    assert ref.encode("<mask> <mask>") == [11, 11]
    # Templates: "ab" -> [ab], "b" -> [b]; pair fits in 8, padded by 2.
    assert ref.encode_template("ab", "b", 8, True, True) == \
        ([0, 7, 2, 2, 5, 2, 1, 1], [1, 1, 1, 1, 1, 1, 0, 0])
    # Longest-first: 4 + 2 content tokens into 7 - 4 = 3: both cut to 3 // 2 = 1, the longer
    # (first) gets the odd one -> 2 + 1.
    assert ref.encode_template("abb ab", "bbb", 7, True, False)[0] == [0, 7, 5, 2, 2, 10, 2]
    assert ref.decode([0, 7, 6, 11], skip_special=True) == "ab "
    # 0xFF -> U+FFFD, whose bytes EF BF BD have no symbols in this vocab -> 3 x <unk>.
    assert ref.encode(b"a\xffb") == [4, 3, 3, 3, 5]
    print("bpe_reference selftest ok")


def expand(spec):
    if "text" in spec:
        return spec["text"]
    if "hex" in spec:
        return bytes.fromhex(spec["hex"])
    if "repeat" in spec:
        s, k = spec["repeat"]
        return s * k
    raise ValueError(f"case {spec.get('name')}: needs text, hex or repeat")


def make_cases(model_dir, inputs_path, out_path):
    ref = Reference.load(model_dir)
    with open(inputs_path, encoding="utf-8") as f:
        inputs = json.load(f)
    out = {"generator": "scripts/bpe_reference.py cases", "model_dir": "tests/fixtures/tokenizer",
           "encode": [], "template": [], "decode": []}
    for spec in inputs["encode"]:
        x = expand(spec)
        rec = {"name": spec["name"]}
        if isinstance(x, bytes):
            rec["hex"] = x.hex()
            rec["valid_utf8"] = False
        else:
            rec["text"] = x
            rec["valid_utf8"] = True
            if "\0" in x:  # C readers of the JSON stop at U+0000: give the bytes too
                rec["hex"] = x.encode("utf-8").hex()
        rec["ids"] = ref.encode(x)
        rec["decoded"] = ref.decode(rec["ids"])
        rec["decoded_hex"] = rec["decoded"].encode("utf-8").hex()  # exact, NULs included
        out["encode"].append(rec)
    for spec in inputs["template"]:
        a = expand(spec)
        b = expand(spec["pair"]) if "pair" in spec else None
        ids, mask = ref.encode_template(a, b, spec.get("max_length"), spec.get("truncate", False),
                                        spec.get("pad", False))
        rec = {"name": spec["name"], "text": a, "max_length": spec["max_length"],
               "truncate": spec.get("truncate", False), "pad": spec.get("pad", False),
               "ids": ids, "attention_mask": mask}
        if b is not None:
            rec["pair"] = b
        out["template"].append(rec)
    for spec in inputs["decode"]:
        ids = ref.encode_template(expand(spec))[0] if "text" in spec else spec["ids"]
        out["decode"].append({"name": spec["name"], "ids": ids,
                              "skip_special": spec["skip_special"],
                              "text": ref.decode(ids, spec["skip_special"])})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out_path}: {len(out['encode'])} encode, {len(out['template'])} template, "
          f"{len(out['decode'])} decode cases")


def bench(model_dir, captions_path):
    """Times this reference (no word cache, pure Python) on the captions bench_tokenizer
    --dump wrote, to put the C numbers in context."""
    import time
    ref = Reference.load(model_dir)
    with open(captions_path, encoding="utf-8") as f:
        caps = [ln.rstrip("\n") for ln in f]
    t0 = time.perf_counter()
    tokens = sum(len(ref.encode(c)) for c in caps)
    dt = time.perf_counter() - t0
    print(f"bpe_reference.py (Python, no cache): {len(caps)} captions, {tokens} tokens, "
          f"{tokens / dt:.3g} tokens/s, {len(caps) / dt:.3g} captions/s")


def main(argv):
    if len(argv) >= 1 and argv[0] == "selftest":
        selftest()
        return 0
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["cases", "encode", "bench"])
    p.add_argument("--captions")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--inputs")
    p.add_argument("--out")
    p.add_argument("text", nargs="?")
    a = p.parse_args(argv)
    selftest()
    if a.cmd == "cases":
        make_cases(a.model_dir, a.inputs, a.out)
    elif a.cmd == "bench":
        bench(a.model_dir, a.captions)
    else:
        print(Reference.load(a.model_dir).encode(a.text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
