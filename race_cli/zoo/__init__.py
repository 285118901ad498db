"""The embedded model zoo: tiny Qwen2-architecture policies and a tiny PRM, built offline on first use.

`byte_tokenizer()` is the tokenizer all of them share (see tokenizer.py).
"""

from __future__ import annotations

from race_cli.zoo.tokenizer import EOS_ID, EOS_TOKEN, VOCAB_SIZE, byte_tokenizer

__all__ = ["EOS_ID", "EOS_TOKEN", "VOCAB_SIZE", "byte_tokenizer"]
