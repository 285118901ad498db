"""The numeric answer check: read the final answer out of a completion and compare it with the gold.

Pure Python (no torch, imports nothing of race): `answers_match(extract_answer(completion), gold)`
is the `number` grader (graders.py), the rule reward's default check (rewards/rule.py) and how
GSM8K's gold answers are read (`normalize_number`, tasks/gsm8k.py).

How an answer is found (`extract_answer`), first form that matches wins:

| form                         | which occurrence | example                         |
|------------------------------|------------------|---------------------------------|
| `#### N` (GSM8K)             | first            | `...\\n#### 1,080`               |
| `\\boxed{N}` / `\\fbox{N}`     | last             | `$\\boxed{\\dfrac{3}{4}}$`         |
| `answer is N`, `answer: N`   | last             | `The final answer is $18.`      |
| `A: N`                       | last             | `A: -7`                         |
| any number                   | last             | `... so she pays 42 dollars.`   |

`####` takes the first occurrence because it ends a GSM8K solution: text after it is a model
running on into a made-up next problem. A complete `\\boxed{...}` that holds no plain number
(`\\boxed{\\sqrt{2}}`) gives None: the model chose a non-numeric answer (math-verify may still
judge it). `####` followed by words (a markdown heading such as
`#### Step 1` or `#### 1. Compute`) and cues followed by an expression (`A: 45+74=119`) are
not answers and fall through to the next form.

Numbers are normalised before comparison: thousands commas (`1,234`, LaTeX `1{,}234`, `1\\,234`),
currency (`$ € £`), percent signs, trailing periods, decimals (`3.50` == `3.5`), fractions
(`3/4`, `\\frac{3}{4}`, `\\dfrac`, `\\tfrac`), negatives (also the unicode minus `−`) and unicode
decimal digits (full-width `１２`, Arabic-Indic `١٢`) mapped to ASCII first. Superscripts such
as `²` are not decimal digits and are never read as numbers. Comparison is exact rational
arithmetic (`fractions.Fraction`) with a small relative tolerance, so a 400-digit number
compares without overflow; nothing here raises on any input string.

The MATH convention (`\\boxed{}` answers compared as expressions) is math.py; graders.py names both.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

# --- text clean-up ------------------------------------------------------------------

# Non-ASCII characters that mean an ASCII one in a number (decimal digits are handled apart).
_CHAR_MAP = {
    "\u2212": "-",  # − minus sign
    "\uff0d": "-",  # － full-width hyphen-minus
    "\ufe63": "-",  # ﹣ small hyphen-minus
    "\u066b": ".",  # ٫ Arabic decimal separator
    "\u066c": ",",  # ٬ Arabic thousands separator
    "\uff0c": ",",  # ， full-width comma
    "\uff0e": ".",  # ． full-width full stop
    "\uff04": "$",  # ＄ full-width dollar
    "\uff05": "%",  # ％ full-width percent
    "\uff0f": "/",  # ／ full-width solidus
}


def _ascii_char(ch: str) -> str:
    if ch in _CHAR_MAP:
        return _CHAR_MAP[ch]
    if unicodedata.category(ch) == "Nd":  # a decimal digit of any script: its value 0..9
        return str(unicodedata.decimal(ch))
    return ch


def _prepare(text: str) -> str:
    """Unicode digits and signs to ASCII; LaTeX thousands separators and escapes removed."""
    if not text.isascii():
        text = "".join(_ascii_char(c) if ord(c) > 127 else c for c in text)
    text = text.replace("{,}", ",")  # LaTeX 1{,}234
    text = re.sub(r"(?<=[0-9])\\[,!;: ](?=[0-9]{3})", "", text)  # LaTeX 1\,234 thin space
    return text.replace("\\$", "$").replace("\\%", "%")


# --- one number ---------------------------------------------------------------------

_NUM = r"(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+"
# A sign only counts when it is not glued to a word or closing bracket ("45-27" is a difference).
_TOKEN = re.compile(
    r"(?P<sign>(?<![\w)\]}])[-+])?"
    r"(?:(?P<cur>[$€£]\s?)(?P<sign2>-)?)?"  # "$-5" as well as "-$5"
    r"(?:\\[dt]?frac\s*\{\s*(?P<fsign>-)?\s*(?P<fnum>" + _NUM + r")\s*\}\s*\{\s*(?P<fden>" + _NUM + r")\s*\}"
    r"|(?P<num>" + _NUM + r")(?:/(?P<den>" + _NUM + r"))?)"
    r"(?P<pct>\s?%)?"
)
# What may follow a number that is an operand, not an answer: "45+74=119", "9 * 2".
_EXPRESSION_AFTER = re.compile(r"\s*[-+*/×÷=^]\s*[$(]?[0-9]")


def _canonical_decimal(s: str) -> str:
    """'1,080' -> '1080', '003.50' -> '3.5', '.5' -> '0.5', '2.0' -> '2'."""
    s = s.replace(",", "")
    whole, _, frac = s.partition(".")
    whole = whole.lstrip("0") or "0"
    frac = frac.rstrip("0")
    return f"{whole}.{frac}" if frac else whole


def _canonical(m: re.Match) -> str | None:
    """The canonical string of one matched number: sign, digits, '/' for fractions (None for x/0)."""
    negative = (m.group("sign") == "-") != (m.group("sign2") == "-")
    if m.group("fnum") is not None:
        negative ^= m.group("fsign") == "-"
        body = _canonical_decimal(m.group("fnum")) + "/" + _canonical_decimal(m.group("fden"))
    else:
        body = _canonical_decimal(m.group("num"))
        if m.group("den") is not None:
            body += "/" + _canonical_decimal(m.group("den"))
    if body.endswith("/0"):  # division by zero is not a number
        return None
    if negative and body.strip("0./"):  # "-0" is "0"
        body = "-" + body
    return body


def normalize_number(text: str | None) -> str | None:
    """The canonical form of a number written alone ('$1,080.50' -> '1080.5', '\\frac{3}{4}' -> '3/4').

    Returns None when `text` is not one number (empty, words, 'inf', 'nan', two numbers).
    """
    if not isinstance(text, str):
        return None
    s = _prepare(text).strip().rstrip(".").strip()
    m = _TOKEN.fullmatch(s)
    return _canonical(m) if m else None


def to_fraction(canonical: str) -> Fraction | None:
    """Exact value of a canonical number string; None when it cannot be built (x/0, >4300 digits)."""
    try:
        num, _, den = canonical.partition("/")
        value = Fraction(num)
        return value / Fraction(den) if den else value
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


# --- finding the final answer -------------------------------------------------------

_HASHES = re.compile(r"####[ \t]*(?:\*\*)?[ \t]*")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_CUE = re.compile(r"(?i)\banswer\b\s*(?:is|was|[:=])\s*[:=]?")
_A_CUE = re.compile(r"(?<![A-Za-z])A\s*:")
_MARKUP = re.compile(r"(?:\s|\*\*|\$(?![0-9])|\\\(|\\\[)*")  # between a cue and its number
_HEADING_AFTER = re.compile(r"[.)]\s+[A-Za-z]")  # "#### 1. Compute": a numbered heading


def _token_at(text: str, pos: int) -> re.Match | None:
    """The number starting at `pos` (after optional markup), unless it opens an expression."""
    pos = _MARKUP.match(text, pos).end()
    m = _TOKEN.match(text, pos)
    if m is None or _EXPRESSION_AFTER.match(text, m.end()):
        return None
    return m


def _from_hashes(text: str) -> str | None:
    for cue in _HASHES.finditer(text):
        m = _token_at(text, cue.end())
        if m and not _HEADING_AFTER.match(text, m.end()) and _canonical(m) is not None:
            return _canonical(m)
    return None


def _braced(text: str, open_pos: int) -> str | None:
    """Content of the brace group opened at text[open_pos - 1] == '{', nested braces allowed."""
    depth = 1
    for i in range(open_pos, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_pos:i]
    return None  # unbalanced: a truncated completion


_UNITS = re.compile(r"\\(?:text|mbox|mathrm|textbf)\s*\{[^{}]*\}|\^\s*\{?\\circ\}?|\\quad")


def _boxed_number(content: str) -> str | None:
    """'18', '\\$18', '18\\text{ dollars}', 'x = 18' -> '18'; non-numbers ('\\sqrt{2}') -> None."""
    s = _UNITS.sub(" ", content).rpartition("=")[2].strip()
    m = _TOKEN.match(s)
    if m is None or not re.fullmatch(r"[A-Za-z .]*", s[m.end():]):
        return None
    return _canonical(m)


def _from_boxed(text: str) -> tuple[bool, str | None]:
    """(found a complete box, its number). The last complete box decides, numeric or not."""
    for cue in reversed(list(_BOXED.finditer(text))):
        content = _braced(text, cue.end())
        if content is not None:
            return True, _boxed_number(content)
    return False, None


def _from_cue(text: str, cue: re.Pattern) -> str | None:
    for c in reversed(list(cue.finditer(text))):
        m = _token_at(text, c.end())
        if m and _canonical(m) is not None:
            return _canonical(m)
    return None


def _last_number(text: str) -> str | None:
    last = None
    for last in _TOKEN.finditer(text):
        pass
    return _canonical(last) if last else None


def extract_answer(text: str | None) -> str | None:
    """The final answer written in a model output, as a canonical number string, or None.

    Forms in priority order: `#### N`, `\\boxed{N}`, "answer is N" / "answer: N", "A: N", then
    the last number anywhere (see the module docstring). '#### $1,080.' -> '1080'.
    """
    if not isinstance(text, str) or not text:
        return None
    text = _prepare(text)
    found = _from_hashes(text)
    if found is not None:
        return found
    boxed, found = _from_boxed(text)
    if boxed:  # a complete \\boxed{} is the answer the model chose, even when it is not a number
        return found
    for cue in (_ANSWER_CUE, _A_CUE):
        found = _from_cue(text, cue)
        if found is not None:
            return found
    return _last_number(text)


# --- comparison -------------------------------------------------------------------


def answers_match(pred: str | None, gold: str | None, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """True when two answers are the same number: |pred - gold| <= max(abs_tol, rel_tol * max(|pred|, |gold|)).

    Both sides go through `normalize_number` ('1,080' == '1080.00' == '$1080'); fractions are
    exact ('3/4' == '0.75'). Anything that is not one finite number (None, '', 'inf', 'nan',
    words) never matches. Never raises: numbers too long to convert compare as digit strings.
    """
    p, g = normalize_number(pred), normalize_number(gold)
    if p is None or g is None:
        return False
    if p == g:
        return True
    pv, gv = to_fraction(p), to_fraction(g)
    if pv is None or gv is None:
        return False
    tol = max(Fraction(abs_tol), Fraction(rel_tol) * max(abs(pv), abs(gv)))
    return abs(pv - gv) <= tol
