"""gpt2_byte_level.py: the two fixed tables of GPT-2's byte-level BPE, shared by
scripts/train_bpe.py (which writes vocabularies) and scripts/bpe_reference.py (the independent
reference bt's tokenizer is checked against), written from GPT-2's published encoder.

  GPT2_PATTERN       the pre-tokenization regex (for the `regex` module: \\p{L}, \\p{N})
  bytes_to_unicode() GPT-2's byte -> character table: printable Latin-1 bytes map to
                     themselves, the other 68 bytes to U+0100.. in byte order, so every byte
                     becomes one visible character (bpe_reference.py's selftest checks entries
                     by hand).

Deliberately not here: merging, vocabularies, anything of the C implementation
(src/data/tokenizer.c has its own tables; the reference must stay independent of it).
"""

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    """GPT-2's table as {byte: character}."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
