"""The byte tokenizer every zoo model shares: token id == byte value (0..255), plus `<|endoftext|>` = 256.

It is a `transformers.Qwen2Tokenizer` with GPT-2's byte-to-unicode alphabet as the vocabulary and
no merges, so every UTF-8 byte is one token and `decode(encode(s)) == s` for any string. It saves
with `save_pretrained` and reloads with `AutoTokenizer.from_pretrained` (beside a qwen2 config.json).
There is no chat template: zoo prompts are plain text. Padding side is the library default (right),
as for real Qwen2.5 tokenizers: generation code sets `padding_side="left"` itself.
"""

from __future__ import annotations

EOS_TOKEN = "<|endoftext|>"
EOS_ID = 256  # eos and pad
VOCAB_SIZE = 257  # 256 bytes + eos


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from each byte to a printable unicode character.

    Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes map to
    chr(256 + n) in byte order. The same table the `tokenizers` ByteLevel pre-tokenizer uses.
    """
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def byte_tokenizer():
    """A fresh byte-level `Qwen2Tokenizer`: ids 0..255 are bytes, 256 is `<|endoftext|>` (eos and pad)."""
    from transformers import Qwen2Tokenizer

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab[EOS_TOKEN] = EOS_ID
    tok = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=None, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN)
    return tok
