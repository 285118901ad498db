"""Turn a task item into the prompt text a policy sees, and a completion into its reasoning steps.

Two prompt styles:

- **chat** (real instruction models, e.g. Qwen2.5-Instruct): one user message, the question and
  an instruction, rendered by the tokenizer's own chat template with the assistant turn opened
  (`apply_chat_template(..., add_generation_prompt=True, tokenize=False)`).
- **plain** (the byte-level zoo models, base models without a template): short on purpose, since
  a byte-level model pays one token per character:

      End with '#### <number>'.
      Q: 45+74-27
      A:

  The completion starts right after "A:" (e.g. " 45+74=119\n119-27=92\n#### 92").

A task's *prompt convention* says which final-answer form its instruction asks for: `HASHES`
(`#### <number>`, read first by `race_cli.answers.number`; arithmetic, GSM8K) or `BOXED`
(`\\boxed{}`, the MATH convention read by `race_cli.answers.math`; MATH-500, jsonl tasks
graded with `math`). Plain prompts then read e.g. "Put the final answer in \\boxed{}.\nQ: ...\nA:".
"""

from __future__ import annotations

from dataclasses import dataclass

from race_cli.errors import RaceError
from race_cli.tasks.base import Item

PLAIN_INSTRUCTION = "End with '#### <number>'."  # 25 characters: every one is a token for byte models
CHAT_INSTRUCTION = "Solve the problem step by step, one step per line, and end with '#### <number>'."
STYLES = ("auto", "chat", "plain")


@dataclass(frozen=True)
class Convention:
    """The answer form a task asks for: its instruction line for plain and for chat prompts."""

    name: str  # "hashes" | "boxed"
    plain: str  # instruction line of plain prompts (short: byte-level models pay a token per character)
    chat: str  # instruction line of chat prompts


HASHES = Convention("hashes", PLAIN_INSTRUCTION, CHAT_INSTRUCTION)
BOXED = Convention("boxed", "Put the final answer in \\boxed{}.",
                   "Solve the problem step by step, and put the final answer in \\boxed{}.")
CONVENTIONS = {c.name: c for c in (HASHES, BOXED)}


def has_chat_template(tokenizer) -> bool:
    """True when `tokenizer` carries a chat template (`tokenizer.chat_template` is set)."""
    return bool(getattr(tokenizer, "chat_template", None))


def format_prompt(item: Item | str, tokenizer=None, *, style: str = "auto",
                  instruction: str | None = None, convention: Convention = HASHES) -> str:
    """The prompt text for one item (or a bare question string).

    style: "auto" = chat when the tokenizer has a chat template, plain otherwise; "chat" requires
        a template; "plain" never uses one.
    instruction: the line that states the answer format; None = the convention's line (HASHES:
        PLAIN_INSTRUCTION for plain prompts, CHAT_INSTRUCTION for chat prompts); "" = no line.
    convention: the task's answer form (HASHES or BOXED).
    """
    if style not in STYLES:
        raise RaceError(f"Prompt style {style!r} is unknown; expected one of {', '.join(STYLES)}.")
    question = item.question if isinstance(item, Item) else item
    if not isinstance(question, str):
        raise RaceError(f"format_prompt needs an Item or a question string, got {type(item).__name__}.")
    use_chat = style == "chat" or (style == "auto" and has_chat_template(tokenizer))
    if use_chat:
        if not has_chat_template(tokenizer):
            raise RaceError("Prompt style 'chat' needs a tokenizer with a chat template "
                            f"({type(tokenizer).__name__} has none); use style='plain' or 'auto'.")
        line = convention.chat if instruction is None else instruction
        text = f"{question}\n{line}" if line else question
        return tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)
    line = convention.plain if instruction is None else instruction
    head = f"{line}\n" if line else ""
    return f"{head}Q: {question}\nA:"


def split_steps(text: str, separator: str = "\n") -> list[str]:
    """The reasoning steps of a completion: pieces between separators, stripped, blank ones dropped.

    'a=1\\n\\nb=2\\n#### 2\\n' -> ['a=1', 'b=2', '#### 2'] with separator '\\n'.
    """
    if not separator:
        raise RaceError("The step separator is empty; expected a string such as '\\n' or '\\n\\n'.")
    return [s.strip() for s in text.split(separator) if s.strip()]
