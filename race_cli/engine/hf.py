"""What race asks of transformers and peft, written once for every version it supports.

Keyword and method names that moved between releases (`dtype=` vs `torch_dtype=`, transformers 5's
activation_checkpointing_enable) and a deprecation notice peft raises on race's behalf. No torch at
import time; the engine and the two cost audits (which build the engine's models) call these.
"""

from __future__ import annotations

import re
import warnings
from typing import Any


def dtype_kwarg(dtype: Any, version: str | None = None) -> dict:
    """`from_pretrained`'s dtype keyword: `dtype=` from transformers 4.56 on, `torch_dtype=` before.

    Older versions ignore an unknown `dtype=` and load float32, which would double the policy's
    memory on a GPU; newer ones warn on `torch_dtype=`.
    """
    if version is None:
        import transformers

        version = transformers.__version__
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def enable_checkpointing(model: Any, *, lora: bool) -> None:
    """Recompute each decoder layer in backward (non-reentrant); LoRA needs grad-requiring inputs.

    transformers 5 renamed gradient_checkpointing_enable (now a deprecated alias) to
    activation_checkpointing_enable; older releases have only the first."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if lora:
        model.enable_input_require_grads()


def lora_wrap(model: Any, lora_config: Any) -> Any:
    """peft.get_peft_model(model, lora_config), without the deprecation notice peft raises on race's behalf.

    PeftModel.__init__ (peft 0.21) reads transformers' deprecated `is_gradient_checkpointing`; the
    FutureWarning names a call race does not make, so only that one message is silenced, here."""
    from peft import get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, lora_config)


def save_model(model: Any, folder: str, **kwargs: Any) -> None:
    """`model.save_pretrained(folder)`; a PEFT adapter with `save_embedding_layers=False`.

    PEFT's default ("auto") asks the Hub for the base model's config.json, at the Hub's default revision
    rather than the pinned one, on every save whose base is a hub id (HF_HUB_OFFLINE=1 aside), to learn
    whether the vocabulary was resized. race never resizes it nor adapts the embeddings, so the adapter
    holds the LoRA weights only and no save goes to the network."""
    from peft import PeftModel

    if isinstance(model, PeftModel):
        kwargs["save_embedding_layers"] = False
    model.save_pretrained(folder, **kwargs)
