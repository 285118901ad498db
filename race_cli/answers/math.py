"""MATH-style final answers without math-verify: find the answer, normalise it, compare it.

    math_equal("\\dfrac{3}{4}", "0.75")            # True
    math_equal("(-\\infty, 2]", "(-\\infty, 2)")    # False: the brackets differ
    extract_math_answer("... so $\\boxed{\\frac{\\sqrt3}{3}}$.")  # '\\frac{\\sqrt3}{3}'

The `math` grader (race_cli/answers/graders.py) asks it first, and alone when the optional
`math-verify` package is not installed; the `math-normalizer` grader is this module alone. Pure Python,
no sympy; nothing here raises on any input string.

Forms it covers (each both as the reference and as the model's answer):

| form                | examples                                             | compared as |
|---------------------|------------------------------------------------------|-------------|
| integers, decimals  | `42`, `-3`, `1,080`, `10,\\!080`, `.35`, `3.50`      | value |
| fractions           | `3/4`, `\\frac34`, `\\dfrac{3}{4}`, `\\tfrac{3}{4}`, `1\\frac{4}{5}` (mixed) | value |
| roots, pi, powers   | `3\\sqrt{13}`, `\\sqrt[3]{2}`, `\\frac{\\sqrt{3}}{3}`, `2\\pi`, `2^{10}` | value |
| complex numbers     | `6-5i`, `1+274i`                                      | value (`i` is the unit) |
| expressions         | `x^5-x^4+1`, `(a+5)(b+2)`, `\\cot x`, `2k+2`           | value at three fixed points per letter |
| equations           | `y = 2x + 3` (one-letter left side: its right side), `5x-7y+11z+4=0` | sides' difference, up to a constant factor |
| degrees, percent, money | `90^\\circ`, `30°`, `45\\%`, `\\$18.90`            | the number |
| units               | `5.4 \\text{ cents}`, `864 \\mbox{ inches}^2`, `15 cm`   | the number (unit words dropped) |
| text answers        | `\\text{Evelyn}`, `\\text{(C)}`, `(C)`, `east`          | letters, case-insensitive |
| tuples, intervals   | `(3, \\frac{\\pi}{2})`, `(-\\infty, 0]`, `(0,9) \\cup (9,36)` | element-wise; bracket kinds must match |
| sets and lists      | `\\{1\\pm\\sqrt{5},-2\\}`, `1,-2`, `3 \\pm 2\\sqrt{2}`  | as multisets (`a \\pm b` is two answers) |
| matrices, vectors   | `\\begin{pmatrix} -1/3 \\\\ 2/3 \\end{pmatrix}`         | element-wise, same shape |
| base-n numbers      | `52_8`, `4210_{5}`                                    | normalised text (`_{5}` == `_5`) |

Not covered (normalised text must then match exactly): answers that need algebra beyond evaluating
at points (`\\cos^2 x` vs `1-\\sin^2 x` does work, `\\log` identities with domain issues may not),
inequalities (`x > 2`), functions of several cases, and words in free prose. Numbers compare with
relative tolerance 1e-6: an unsimplified form (`\\frac{2}{4}`) of the right value is right, any
other value is wrong.
"""

from __future__ import annotations

import cmath
import math
import re
from typing import Callable

# --- finding the final answer ---------------------------------------------------------

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)\s*")


def _closing_brace(s: str, i: int) -> int | None:
    """Index of the `}` that closes the `{` at s[i] (nested braces counted); None when unbalanced."""
    depth = 0
    for j in range(i, len(s)):
        depth += s[j] == "{"
        depth -= s[j] == "}"
        if depth == 0:
            return j
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` / `\\fbox{...}` (nested braces allowed), or
    of `\\boxed 5`; None when there is none or it is unbalanced (a truncated completion)."""
    if not isinstance(text, str):
        return None
    for m in reversed(list(_BOX_CMD.finditer(text))):
        i = m.end()
        if i < len(text) and text[i] == "{":
            j = _closing_brace(text, i)
            if j is not None:
                return text[i + 1:j]
            continue
        bare = re.match(r"[^\s$]+", text[i:])  # "\boxed 5$"
        if bare:
            return bare.group(0)
    return None


_HASHES_LINE = re.compile(r"####\s*([^\n]+)")
_ANSWER_LINE = re.compile(r"(?i)\b(?:final answer|answer)\s*(?:is|:)\s*:?\s*([^\n]+)")


def extract_math_answer(text: str | None) -> str | None:
    """The final answer of a completion: the last `\\boxed{}`, else the first `#### ...` line,
    else the last "answer is ..." / "answer: ..." line (trailing '.' and '$' dropped); else None."""
    if not isinstance(text, str) or not text:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    m = _HASHES_LINE.search(text)
    found = m.group(1) if m else None
    if found is None:
        cues = list(_ANSWER_LINE.finditer(text))
        found = cues[-1].group(1) if cues else None
    if found is None:
        return None
    return found.strip().rstrip(".").strip().strip("$").strip() or None


# --- normalising one answer string ------------------------------------------------------

_SPACING = re.compile(r"\\[,!;: ]|\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])|\\displaystyle|~")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree")
_TEXT = re.compile(r"\\(?:text|mbox|mathrm|textbf|textit|mathbf|operatorname)\s*\{([^{}]*)\}")
_UNIT_WORDS = ("cm", "mm", "km", "m", "meter", "meters", "metre", "metres", "inch", "inches", "in", "ft",
               "foot", "feet", "yard", "yards", "mile", "miles", "mph", "unit", "units", "sq", "square",
               "degree", "degrees", "cent", "cents", "dollar", "dollars", "second", "seconds", "sec", "minute",
               "minutes", "min", "hour", "hours", "hr", "day", "days", "week", "weeks", "year", "years",
               "gram", "grams", "g", "kg", "pound", "pounds", "lb", "lbs", "ounce", "ounces", "oz", "liter",
               "liters", "litre", "ml", "gallon", "gallons", "people", "students", "times", "ways", "percent")
_TRAILING_UNITS = re.compile(r"^(.*?[0-9}])\s*(?:(?:" + "|".join(sorted(_UNIT_WORDS, key=len, reverse=True))
                             + r")\b\s*)+(?:\^\s*\{?[23]\}?)?$")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _braced_arg(s: str, i: int) -> tuple[str, int]:
    """The argument starting at s[i]: a `{...}` group's content or one character; (arg, end)."""
    if i < len(s) and s[i] == "{":
        j = _closing_brace(s, i)
        return (s[i + 1:j], j + 1) if j is not None else (s[i + 1:], len(s))
    return (s[i], i + 1) if i < len(s) else ("", i)


_FRAC_SQRT = re.compile(r"\\(frac|sqrt)")


def _brace_commands(s: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac9{19}` -> `\\frac{9}{19}`, `\\sqrt3` -> `\\sqrt{3}`."""
    out, i = [], 0
    while i < len(s):
        m = _FRAC_SQRT.match(s, i)
        if not m:
            out.append(s[i])
            i += 1
            continue
        out.append("\\" + m.group(1))
        i = m.end()
        if m.group(1) == "sqrt" and i < len(s) and s[i] == "[":
            close = s.find("]", i)
            if close > 0:
                out.append(s[i:close + 1])
                i = close + 1
        for _ in range(2 if m.group(1) == "frac" else 1):
            arg, i = _braced_arg(s, i)
            out.append("{" + _brace_commands(arg) + "}")
    return "".join(out)


def normalize(answer: str) -> str:
    """A canonical text form of one answer: markup, spacing, units, degrees and `x =` dropped.

    '\\left( 3, \\dfrac{\\pi}{2} \\right)' -> '(3,\\frac{\\pi}{2})'; '10,\\!080' -> '10080';
    '\\text{(C)}' -> '(C)'; '864 \\mbox{ inches}^2' -> '864'; 'x = 5' -> '5'.
    """
    s = str(answer).strip()
    for a, b in (("$", ""), ("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", "")):
        s = s.replace(a, b) if a != "$" else s.strip("$")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = _SPACING.sub(" ", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = _DEGREES.sub("", s)
    whole_text = _TEXT.fullmatch(s.strip())
    if whole_text:  # a text answer: "\text{Evelyn}", "\text{(C)}"
        s = whole_text.group(1)
    else:  # units in \text{} after a value: "5.4 \text{ cents}", "864 \mbox{ inches}^2"
        s = re.sub(r"(?<=[0-9}])\s*" + _TEXT.pattern + r"(?:\s*\^\s*\{?[23]\}?)?\s*$", "", s)
        s = _TEXT.sub(r"\1", s)
    s = s.replace("\\infty", "\\infty ").replace("\\in ", "\\in")
    m = _TRAILING_UNITS.match(s.strip())
    if m:
        s = m.group(1)
    s = re.sub(r"\s+", "", s).rstrip(".")
    s = re.sub(r"^[a-zA-Z]\\in", "", s)  # "x \in [-2,7]"
    if s.count("=") == 1 and re.fullmatch(r"[a-zA-Z]|\\[a-zA-Z]+", s.split("=")[0]):
        s = s.split("=")[1]  # "x=5", "y=2x+3", "\theta=30"
    s = _brace_commands(s)
    s = re.sub(r"_\{([0-9a-zA-Z]+)\}", r"_\1", s)  # "4210_{5}" -> "4210_5"
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    s = re.sub(r"(?<![0-9])\.([0-9])", r"0.\1", s)  # ".35" -> "0.35"
    return s


# --- evaluating a normalised expression -------------------------------------------------


class _NotValue(Exception):
    """The text is not an expression the evaluator understands."""


_TOKEN = re.compile(r"\s*(\d+\.\d*|\d*\.\d+|\d+|\\[a-zA-Z]+|[a-zA-Z]|[-+*/^(){}\[\]|!])")
_FUNCS: dict[str, Callable[[complex], complex]] = {
    "sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "cot": lambda z: 1 / cmath.tan(z),
    "sec": lambda z: 1 / cmath.cos(z), "csc": lambda z: 1 / cmath.sin(z), "ln": cmath.log, "log": cmath.log,
    "exp": cmath.exp, "arcsin": cmath.asin, "arccos": cmath.acos, "arctan": cmath.atan,
}
_CONSTS = {"pi": math.pi, "infty": math.inf}


def _tokens(s: str) -> list[str]:
    out, i = [], 0
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/")
    while i < len(s):
        m = _TOKEN.match(s, i)
        if not m:
            raise _NotValue(s[i:])
        out.append(m.group(1))
        i = m.end()
    return out


class _Eval:
    """Recursive descent over LaTeX math tokens, values as Python complex numbers.

    expr := term (('+'|'-') term)* ; term := unary (('*'|'/'|implicit) unary)* ;
    unary := ('-'|'+') unary | power ; power := atom ('^' unary)? ; atom := number | letter |
    \\pi | i | (expr) | {expr} | \\frac{}{} | \\sqrt[n]{} | \\func atom | |expr|
    """

    def __init__(self, tokens: list[str], variables: dict[str, complex]):
        self.t, self.i, self.vars = tokens, 0, variables

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _NotValue(f"expected {expected}")
        self.i += 1
        return tok

    def expr(self) -> complex:
        v = self.term()
        while self.peek() in ("+", "-"):
            v = v + self.term() if self.take() == "+" else v - self.term()
        return v

    def _starts_atom(self, tok: str | None) -> bool:
        if tok is None:
            return False
        if tok[0].isdigit() or tok[0] == "." or tok in ("(", "{") or (len(tok) == 1 and tok.isalpha()):
            return True
        return tok.startswith("\\") and (tok[1:] in _FUNCS or tok[1:] in ("frac", "sqrt", "pi") or
                                         tok[1:].isalpha() and tok[1:] not in ("cup", "cap", "pm", "mp", "in"))

    def term(self) -> complex:
        v = self.unary()
        while True:
            tok = self.peek()
            if tok == "*":
                self.take()
                v = v * self.unary()
            elif tok == "/":
                self.take()
                d = self.unary()
                if d == 0:
                    raise _NotValue("division by zero")
                v = v / d
            elif self._starts_atom(tok):
                v = v * self.power()
            else:
                return v

    def unary(self) -> complex:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "+":
            self.take()
        return self.power()

    def power(self) -> complex:
        base = self.atom()
        if self.peek() == "!":
            self.take()
            if base.imag or base.real != int(base.real) or not 0 <= base.real <= 170:
                raise _NotValue("factorial")
            base = complex(math.factorial(int(base.real)))
        if self.peek() == "^":
            self.take()
            exp = self.unary()
            if abs(exp) > 400:
                raise _NotValue("exponent too large")
            try:
                return base ** exp
            except (ZeroDivisionError, OverflowError):
                raise _NotValue("power") from None
        return base

    def group(self) -> complex:
        self.take("{")
        v = self.expr()
        self.take("}")
        return v

    def atom(self) -> complex:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return complex(float(tok))
        if tok in ("(", "{", "["):
            v = self.expr()
            self.take({"(": ")", "{": "}", "[": "]"}[tok])
            return v
        if tok == "|":
            v = self.expr()
            self.take("|")
            return complex(abs(v))
        if tok == "\\frac":
            num, den = self.group(), self.group()
            if den == 0:
                raise _NotValue("division by zero")
            return num / den
        if tok == "\\sqrt":
            n = 2.0
            if self.peek() == "[":
                self.take()
                n = self.expr().real
                self.take("]")
            return self.group() ** (1 / n) if n != 2 else cmath.sqrt(self.group())
        if tok.startswith("\\") and tok[1:] in _FUNCS:
            if self.peek() == "^":  # \sin^2 x
                self.take()
                p = self.atom()
                return _FUNCS[tok[1:]](self.power()) ** p
            return _FUNCS[tok[1:]](self.power())
        if tok.startswith("\\") and tok[1:] in _CONSTS:
            return complex(_CONSTS[tok[1:]])
        if tok == "i":
            return 1j
        if len(tok) == 1 and tok.isalpha() or tok.startswith("\\") and tok[1:].isalpha():
            return self.vars.setdefault(tok, _point(tok, len(self.vars), self.vars.get("#", 0)))
        raise _NotValue(tok)


def _point(name: str, index: int, k: int) -> complex:
    """A fixed, unremarkable value for variable `name` at evaluation point k."""
    seed = sum(ord(c) for c in name) * 0.1234567 + 0.731 * k + 0.37
    return complex(0.5 + (seed % 1.7))


def _values(expr: str, points: int = 3) -> list[complex] | None:
    """The expression's value at `points` evaluation points (one when it has no letters), or None."""
    try:
        toks = _tokens(expr)
        out = []
        for k in range(points):
            ev = _Eval(toks, {"#": k})
            v = ev.expr()
            if ev.i != len(toks):
                return None
            out.append(v)
            if len(ev.vars) == 1:  # only the point index: a constant
                return out
        return out
    except (_NotValue, ValueError, ZeroDivisionError, OverflowError, TypeError, RecursionError):
        return None


def _close(a: complex, b: complex) -> bool:
    if any(math.isinf(x) or math.isnan(x) for x in (a.real, a.imag, b.real, b.imag)):
        return a == b
    return abs(a - b) <= max(1e-9, 1e-6 * max(abs(a), abs(b)))


# --- splitting structured answers -------------------------------------------------------


def _split_top(s: str, sep: str) -> list[str]:
    """Split at `sep` outside any brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    return parts + [s[start:]]


def _matrix(s: str) -> list[list[str]] | None:
    m = re.fullmatch(r"\\begin\{[pbv]?matrix\}(.*)\\end\{[pbv]?matrix\}", s)
    if not m:
        return None
    return [row.split("&") for row in m.group(1).split("\\\\") if row != ""]


def _pm_expand(parts: list[str]) -> list[str]:
    out = []
    for p in parts:
        if "\\pm" in p and p.count("\\pm") == 1:
            a, b = p.split("\\pm")
            out += [f"{a}+{b}" if a else b, f"{a}-{b}" if a else f"-{b}"]
        else:
            out.append(p)
    return out


def _letters(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


# --- comparison -------------------------------------------------------------------------


def _scalar_equal(p: str, g: str) -> bool:
    if p == g:
        return True
    if p.count("=") == 1 and g.count("=") == 1:  # equations: sides' differences proportional
        pl, pr = p.split("=")
        gl, gr = g.split("=")
        dp, dg = _values(f"({pl})-({pr})", 5), _values(f"({gl})-({gr})", 5)
        if dp and dg and len(dp) == len(dg):
            ratios = [a / b for a, b in zip(dp, dg) if abs(b) > 1e-12]
            return len(ratios) == len(dp) and all(_close(r, ratios[0]) for r in ratios)
        return False
    if "=" in p or "=" in g:
        return False
    mixed = re.compile(r"(-?)(\d+)\\frac\{(\d+)\}\{(\d+)\}")  # 1\frac{4}{5} is 1 + 4/5
    p2, g2 = (mixed.sub(lambda m: f"{m[1]}({m[2]}+\\frac{{{m[3]}}}{{{m[4]}}})", x) if mixed.fullmatch(x) else x
              for x in (p, g))
    vp, vg = _values(p2), _values(g2)
    if vp is not None and vg is not None:  # one point each when constant, three when letters occur
        return len(vp) == len(vg) and all(_close(a, b) for a, b in zip(vp, vg))
    # text answers: "(C)" == "C", "Evelyn" == "evelyn"
    if re.fullmatch(r"\(?[A-Za-z ]+\)?", p) and re.fullmatch(r"\(?[A-Za-z ]+\)?", g):
        return _letters(p) == _letters(g)
    return False


def _multiset_equal(ps: list[str], gs: list[str]) -> bool:
    if len(ps) != len(gs):
        return False
    left = list(gs)
    for p in ps:
        hit = next((k for k, g in enumerate(left) if _equal_norm(p, g)), None)
        if hit is None:
            return False
        left.pop(hit)
    return True


def _equal_norm(p: str, g: str) -> bool:
    """Compare two normalised answers (see the module docstring for the rules)."""
    if p == g:
        return True
    if not p or not g:
        return False
    mp, mg = _matrix(p), _matrix(g)
    if mp is not None or mg is not None:
        return (mp is not None and mg is not None and [len(r) for r in mp] == [len(r) for r in mg]
                and all(_equal_norm(a, b) for ra, rb in zip(mp, mg) for a, b in zip(ra, rb)))
    up, ug = _split_top(p, "\\cup"), _split_top(g, "\\cup")
    if len(up) > 1 or len(ug) > 1:
        return len(up) == len(ug) and all(_equal_norm(a, b) for a, b in zip(up, ug))
    set_p = re.fullmatch(r"\\\{(.*)\\\}", p)
    set_g = re.fullmatch(r"\\\{(.*)\\\}", g)
    if set_p or set_g:  # sets: order does not matter; a bare list may stand for a set
        ip = _pm_expand(_split_top(set_p.group(1) if set_p else p, ","))
        ig = _pm_expand(_split_top(set_g.group(1) if set_g else g, ","))
        return _multiset_equal(ip, ig)
    bracket = re.compile(r"([(\[])(.*)([)\]])")
    bp, bg = bracket.fullmatch(p), bracket.fullmatch(g)
    tp = _split_top(bp.group(2), ",") if bp else [p]
    tg = _split_top(bg.group(2), ",") if bg else [g]
    if bp and bg and (len(tp) > 1 or len(tg) > 1):  # tuples and intervals: brackets and order matter
        return ((bp.group(1), bp.group(3)) == (bg.group(1), bg.group(3)) and len(tp) == len(tg)
                and all(_equal_norm(a, b) for a, b in zip(tp, tg)))
    lp, lg = _pm_expand(_split_top(p, ",")), _pm_expand(_split_top(g, ","))
    if len(lp) > 1 or len(lg) > 1:  # "1,-2" == "-2,1"; "1\pm\sqrt{19}" == "1+\sqrt{19},1-\sqrt{19}"
        return _multiset_equal(lp, lg)
    return _scalar_equal(p, g)


def math_equal(pred: str | None, gold: str | None) -> bool:
    """True when two MATH-style answers are the same (see the module docstring); never raises."""
    if not isinstance(pred, str) or not isinstance(gold, str) or not pred.strip() or not gold.strip():
        return False
    try:
        return _equal_norm(normalize(pred), normalize(gold))
    except (RecursionError, ValueError, IndexError):
        return False


def grade_completion(completion: str | None, gold: str) -> bool:
    """True when the final answer of a completion (`extract_math_answer`) equals `gold`."""
    return math_equal(extract_math_answer(completion), gold)
