"""Process reward model (PRM) scoring: one score per reasoning step, aggregated into a reward.

A completion is cut into steps at a separator string (default a newline; blank steps dropped,
as `race_cli.tasks.prompting.split_steps` does). The PRM reads one forward pass over

    template with {question} and {completion} filled in      (default "{question}\\n{completion}")

and each step's score is read at one token that ends it:

- `step_tag=None` (default): the completion is used as written; a step is read at the last token
  of the separator that ends it, and a last step without a trailing separator at the
  completion's last token.
- `step_tag="<extra_0>"`, `" ки"`, ...: the completion is rebuilt as `step + step_tag` for every
  step, joined by `step_joiner` (default: the separator, or nothing when the tag already ends
  with the separator); each step is read at the last token of its tag.

Two ways to turn the model's output at those tokens into P(step is correct):

- `format="classifier"`: a token-classification model: the Qwen2.5-Math-PRM layout (a Qwen2
  body and a two-layer head, built here from its safetensors by weight name, see
  `load_qwen2_prm`: none of the repository's code runs) or any transformers
  `*ForTokenClassification`. num_labels=2: softmax probability of label 1; num_labels=1:
  sigmoid of the single logit.
- `format="token"`: a causal LM (`AutoModelForCausalLM`, the Math-Shepherd style): p(good) /
  (p(good) + p(bad)) from the next-token distribution at the tag, for the configured good and
  bad tokens ("+" and "-" by default), i.e. the softmax over those two logits.

Presets: Qwen2.5-Math-PRM-7B is `format="classifier", step_tag="<extra_0>", step_joiner=""`
with its chat template written into `template` (conf/reward/prm-7b.yaml); the separator is the
one the policy is told to use (one step per line: "\\n"), so each line reaches the PRM as
one `step<extra_0>` unit, the layout the PRM's card builds from its own steps. Math-Shepherd
is `format="token", step_tag=" ки", template="{question} {completion}"`. The embedded byte-level tiny PRM reads
at each newline with the default template.

Scoring runs under `torch.no_grad()` (not `inference_mode`, so FlopCounterMode can audit it),
batches of `batch_size` sequences sorted by length, right-padded, one forward per batch. The
cost goes to the feedback phase: `reward()` returns the FLOPs of those forwards from
`race_cli.cost.flops.reward_model_flops`, with the real and padded token counts it used.
torch and transformers are imported inside the functions that need them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

from race_cli.errors import RaceError
from race_cli.rewards.rule import rule_reward
from race_cli.tasks.prompting import split_steps

FORMATS = ("classifier", "token", "logprob")
AGGREGATIONS = ("min", "prod", "last", "mean")


def aggregate(step_scores: Sequence[float], how: str = "min") -> float:
    """One reward from per-step scores: min | prod | last | mean. No steps -> 0.0."""
    if how not in AGGREGATIONS:
        raise RaceError(f"PRM aggregation {how!r} is unknown; expected one of {', '.join(AGGREGATIONS)}.")
    if not step_scores:
        return 0.0
    if how == "min":
        return float(min(step_scores))
    if how == "prod":
        return float(math.prod(step_scores))
    if how == "last":
        return float(step_scores[-1])
    return float(sum(step_scores) / len(step_scores))


@dataclass(frozen=True)
class Scored:
    """What one `score_detailed` call did: scores plus the token counts its forwards ran on."""

    step_scores: list[list[float]]  # per completion, per step, P(step correct) in [0, 1]
    seq_lens: list[int]  # real tokens of every scored sequence, in input order (0 = no steps, not run)
    batch_seq_lens: list[list[int]]  # real lengths per forward batch
    padded_lens: list[int]  # padded length of each forward batch
    flops: Any  # race_cli.cost.flops.Flops of all forwards (model and executed conventions)
    seconds: float  # wall seconds of tokenising, forwards and read-out


def _owner_of_chars(offsets: Sequence[tuple[int, int]], n_chars: int) -> list[int]:
    """For every character, the index of the LAST token covering it (-1 if none: e.g. stripped)."""
    owner = [-1] * n_chars
    for t, (start, end) in enumerate(offsets):
        for c in range(start, min(end, n_chars)):
            owner[c] = t
    return owner


# --- the Qwen2.5-Math-PRM layout, built here (no remote code) -------------------------------
#
# Its config.json says model_type "qwen2", architectures ["Qwen2ForProcessRewardModel"], and maps
# AutoConfig/AutoModel to code in the repository (auto_map). That code is a Qwen2 body plus
#     score = Sequential(Linear(d, d), ReLU(), Linear(d, num_labels=2))
# read at every position; the safetensors hold `model.*` (the body, Qwen2Model's names) and
# `score.0.weight`, `score.0.bias`, `score.2.weight`, `score.2.bias`. P(step correct) is the
# softmax's label 1 at the `<extra_0>` token written after each step. We build the same modules
# from transformers' own Qwen2Model and copy the tensors in by name: nothing from the repository
# is imported or run. (A checkpoint may also carry `lm_head.weight`: unused, skipped.)

PRM_ARCHITECTURE = "Qwen2ForProcessRewardModel"
PRM_HEAD_WEIGHTS = ("score.0.weight", "score.0.bias", "score.2.weight", "score.2.bias")
_FETCH_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]  # never *.py


def fetch_checkpoint(path: str, revision: str | None = None) -> str:
    """A local folder as is; a hub id downloaded at `revision` (config, safetensors, tokenizer: no code)."""
    from pathlib import Path

    if Path(path).expanduser().is_dir():
        return str(Path(path).expanduser())
    from huggingface_hub import snapshot_download

    return snapshot_download(path, revision=revision, allow_patterns=_FETCH_PATTERNS)


def _read_config(folder: str) -> dict:
    import json
    from pathlib import Path

    file = Path(folder) / "config.json"
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise OSError(f"{file} is missing or not JSON ({e})") from None


def is_qwen2_prm(folder: str) -> bool:
    """Does the checkpoint's config name the Qwen2.5-Math-PRM architecture?"""
    return PRM_ARCHITECTURE in (_read_config(folder).get("architectures") or [])


def read_safetensors(folder: str, device: str = "cpu") -> dict:
    """Every tensor of a checkpoint folder: model.safetensors, or the shards its index lists."""
    import json
    from pathlib import Path

    from safetensors.torch import load_file

    root = Path(folder)
    index = root / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (root / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    else:
        raise OSError(f"{root} holds no model.safetensors (nor model.safetensors.index.json); "
                      "this loader reads safetensors only (never pickled .bin files)")
    tensors: dict = {}
    for shard in shards:
        tensors.update(load_file(str(root / shard), device=device))
    return tensors


_PRM_CLASS = None


def qwen2_prm_class():
    """The module class (built on first use, so importing this file does not import torch)."""
    global _PRM_CLASS
    if _PRM_CLASS is not None:
        return _PRM_CLASS
    import torch
    from transformers import Qwen2Model
    from transformers.modeling_outputs import TokenClassifierOutput

    class Qwen2ProcessRewardModel(torch.nn.Module):
        """Qwen2 body + two-layer scoring head; forward(input_ids, attention_mask).logits is [B, T, num_labels]."""

        def __init__(self, config):
            super().__init__()
            self.config = config
            self.model = Qwen2Model(config)
            d = config.hidden_size
            self.score = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.ReLU(),
                                             torch.nn.Linear(d, config.num_labels))

        def forward(self, input_ids=None, attention_mask=None, **kwargs):
            kwargs.setdefault("use_cache", False)  # a scorer reads every position once: no KV cache to keep
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state  # [B, T, d]
            return TokenClassifierOutput(logits=self.score(hidden))  # [B, T, num_labels]

    _PRM_CLASS = Qwen2ProcessRewardModel
    return _PRM_CLASS


def load_qwen2_prm(folder: str, *, device: str = "cpu", dtype=None):
    """Build the Qwen2.5-Math-PRM layout from `folder`'s config and copy its safetensors in by name.

    Refuses a checkpoint whose tensors do not match the layout exactly (missing or extra names,
    other shapes): a wrong file must not score with random weights. dtype None = the checkpoint's.
    """
    import torch
    from transformers import Qwen2Config

    raw = {k: v for k, v in _read_config(folder).items() if k not in ("auto_map", "architectures")}
    raw.setdefault("num_labels", 2)  # the published head has 2 labels; its config does not say so
    config = Qwen2Config(**raw)
    config.architectures = [PRM_ARCHITECTURE]
    tensors = {k: v for k, v in read_safetensors(folder).items() if not k.startswith("lm_head.")}
    with torch.device("meta"):  # no random init of billions of weights: the checkpoint fills them
        model = qwen2_prm_class()(config)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    wrong = sorted(k for k in set(want) & set(tensors) if tuple(tensors[k].shape) != want[k])
    if missing or extra or wrong:
        raise ValueError(f"{folder} does not hold the {PRM_ARCHITECTURE} layout: "
                         f"missing {missing[:4]}, unexpected {extra[:4]}, wrong shape {wrong[:4]}")
    model.load_state_dict(tensors, strict=True, assign=True)
    model.model.rotary_emb = type(model.model.rotary_emb)(config)  # its buffers are computed, not stored
    target = dtype if dtype is not None else next(iter(tensors.values())).dtype
    model = model.to(device=device, dtype=target)
    # built again after the cast, so inv_freq stays float32 as from_pretrained keeps it (cast to bf16,
    # the angle at position 900 is off by up to ~1.1 rad at head dim 128, base 10000)
    model.model.rotary_emb = type(model.model.rotary_emb)(config).to(device)  # .to(device) keeps float32
    return model.eval()


def score_logits(model, ids):
    """One scoring forward: logits [B, T, num_labels or V] of `ids` [B, T], without a KV cache.

    transformers 5 takes `use_cache` from the config when it is not passed (Qwen2Config.use_cache
    is True) and would build a DynamicCache of every layer's keys and values, held through the
    forward and read by nobody: 2 * L * h_kv * d_h * 2 bytes per token, ~0.9 GiB for PRM-7B at
    16 x 1024 tokens. memory_audit.measure_reward runs this function."""
    out = model(input_ids=ids, use_cache=False)
    return out.logits if hasattr(out, "logits") else out[0]


def _two_layer_head(model) -> bool:
    """True for the Qwen2.5-Math-PRM head (Linear d->d, ReLU, Linear d->labels), False for one Linear."""
    import torch

    score = getattr(model, "score", None)
    return isinstance(score, torch.nn.Sequential) and len(score) == 3


class ProcessRewardModel:
    """Scores completions step by step with a PRM (see the module docstring for the input layout).

    model: a token-classification model (format="classifier") or a causal LM (format="token").
    tokenizer: a fast tokenizer of the same model (character offsets are used to find steps).
    separator: the string that separates steps in a completion ("\\n"; "\\n\\n" for Qwen-style).
    step_tag: a string written after every step and read at (None = read at the separator).
    step_joiner: between a tag and the next step (None = separator, or "" if the tag ends with it).
    template: the PRM's input, with {question} and {completion}; "{question}\\n{completion}".
    good_token, bad_token: format="token": the label tokens (a string of one token, or an id).
    aggregation: per-step scores -> reward, min | prod | last | mean.
    batch_size: sequences per forward.
    add_special_tokens: let the tokenizer add its BOS/EOS as in training (most Qwen add none).
    """

    def __init__(self, model, tokenizer, *, format: str = "classifier", separator: str = "\n",
                 step_tag: str | None = None, step_joiner: str | None = None,
                 template: str = "{question}\n{completion}", good_token: str | int = "+",
                 bad_token: str | int = "-", aggregation: str = "min", batch_size: int = 16,
                 add_special_tokens: bool = True):
        from race_cli.cost.flops import Arch

        problems = []
        if format not in FORMATS:
            problems.append(f"PRM format {format!r} is unknown; expected 'classifier' (token-classification "
                            "head, Qwen2.5-Math-PRM style), 'token' (causal LM label tokens, Math-Shepherd style) "
                            "or 'logprob' (a causal LM's calibrated teacher-forced log-probs of the steps).")
        if not separator:
            problems.append("The PRM step separator is empty; expected a string such as '\\n'.")
        if step_tag == "":
            problems.append("step_tag is empty; give a string such as ' ки' or '<extra_0>', or None to read at the separator.")
        if template.count("{completion}") != 1:
            problems.append(f"PRM template {template!r} must contain '{{completion}}' exactly once "
                            "(and usually '{question}'), e.g. '{question}\\n{completion}'.")
        if aggregation not in AGGREGATIONS:
            problems.append(f"PRM aggregation {aggregation!r} is unknown; expected one of {', '.join(AGGREGATIONS)}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            problems.append(f"PRM batch_size={batch_size!r}: expected a positive integer such as 16.")
        if not getattr(tokenizer, "is_fast", False):
            problems.append(f"The PRM tokenizer ({type(tokenizer).__name__}) gives no character offsets; "
                            "load a fast tokenizer (AutoTokenizer.from_pretrained(..., use_fast=True)).")
        if problems:
            raise RaceError(*problems)
        self.model, self.tokenizer, self.format = model, tokenizer, format
        self.separator, self.step_tag, self.template = separator, step_tag, template
        if step_joiner is None and step_tag is not None:
            step_joiner = "" if step_tag.endswith(separator) else separator
        self.step_joiner = step_joiner
        self.aggregation, self.batch_size, self.add_special_tokens = aggregation, batch_size, add_special_tokens
        self.arch = Arch.from_config(model.config)  # shapes for the ledger; refuses unknown configs
        self.num_labels = int(getattr(model.config, "num_labels", 2)) if format == "classifier" else 0
        self.label_ids = (self._token_id(good_token, "good_token"), self._token_id(bad_token, "bad_token")) \
            if format == "token" else None
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = 0 if pad is None else int(pad)  # right padding: masked, never read

    @classmethod
    def from_pretrained(cls, path: str, *, format: str = "classifier", device: str = "cpu",
                        dtype: str | None = None, trust_remote_code: bool = False, revision: str | None = None,
                        **kwargs) -> "ProcessRewardModel":
        """Load a PRM and its tokenizer from a local folder or hub id; kwargs go to the constructor.

        format="classifier": a checkpoint whose config names `Qwen2ForProcessRewardModel` (the
        Qwen2.5-Math-PRM layout) is built here by weight name (`load_qwen2_prm`, no remote code);
        any other classifier through AutoModelForTokenClassification. "token"/"logprob":
        AutoModelForCausalLM. dtype: None or "auto" (the checkpoint's), "float32", "bfloat16",
        "float16", or a torch.dtype. revision: the hub commit to load (ignored for local folders).
        trust_remote_code: off unless the config says so (with a revision: see config.validate).
        """
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

        if format not in FORMATS:
            raise RaceError(f"PRM format {format!r} is unknown; expected one of {', '.join(FORMATS)}.")
        if isinstance(dtype, str) and dtype != "auto":
            if not isinstance(getattr(torch, dtype, None), torch.dtype):
                raise RaceError(f"PRM dtype {dtype!r} is unknown; expected auto, float32, bfloat16 or float16.")
            dtype = getattr(torch, dtype)
        elif dtype is not None and not isinstance(dtype, (str, torch.dtype)):
            raise RaceError(f"PRM dtype {dtype!r} is unknown; expected auto, float32, bfloat16 or float16.")
        try:
            folder = fetch_checkpoint(path, revision)
            if format == "classifier" and is_qwen2_prm(folder):
                tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
                model = load_qwen2_prm(folder, device=device, dtype=None if dtype == "auto" else dtype)
                return cls(model, tokenizer, format=format, **kwargs)
            auto = AutoModelForTokenClassification if format == "classifier" else AutoModelForCausalLM
            major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
            dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56
            load_kw = {dtype_key: dtype} if dtype is not None else {}
            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
            model = auto.from_pretrained(folder, trust_remote_code=trust_remote_code, **load_kw)
        except (OSError, ValueError) as e:
            raise RaceError(f"Could not load the reward model from {path!r}: {str(e).splitlines()[0]}",
                            "Expected a local folder with config.json, weights and tokenizer files, or a hub id "
                            "(needs network); check reward.model.path and reward.model.revision.") from None
        model.to(device).eval()
        return cls(model, tokenizer, format=format, **kwargs)

    # --- building inputs -------------------------------------------------------------

    def _token_id(self, token: str | int, name: str) -> int:
        if isinstance(token, int) and not isinstance(token, bool):
            return token
        ids = self.tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise RaceError(f"PRM {name}={token!r} is {len(ids)} tokens for this tokenizer ({ids}); "
                            "expected a string of exactly one token, or pass its token id.")
        return ids[0]

    def build_input(self, question: str, completion: str) -> tuple[str, list[int]]:
        """The PRM's input text and, per step, the character index its score is read at."""
        head, _, tail = self.template.partition("{completion}")
        head, tail = head.replace("{question}", question), tail.replace("{question}", question)
        ends: list[int] = []
        if self.step_tag is None:
            body, pos, sep = completion, 0, self.separator
            while True:
                idx = completion.find(sep, pos)
                if idx < 0:
                    if completion[pos:].strip():
                        ends.append(len(head) + len(completion) - 1)  # last step: last character
                    break
                if completion[pos:idx].strip():
                    ends.append(len(head) + idx + len(sep) - 1)  # last character of its separator
                pos = idx + len(sep)
        else:
            steps = split_steps(completion, self.separator)
            body = ""
            for i, step in enumerate(steps):
                body += step + self.step_tag
                ends.append(len(head) + len(body) - 1)  # last character of its tag
                if i < len(steps) - 1:
                    body += self.step_joiner
        return head + body + tail, ends

    def encode_many(self, questions: Sequence[str], completions: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """(token ids, token index of each step's score) per pair; one tokenizer call for all."""
        return [(ids, pos) for ids, pos, _ in self._encode(questions, completions)]

    def _encode(self, questions: Sequence[str], completions: Sequence[str]) -> list[tuple[list[int], list[int], int]]:
        """(token ids, step read positions, token index where the completion starts) per pair."""
        built = [self.build_input(q, c) for q, c in zip(questions, completions)]
        if not built:
            return []
        starts = [len(self.template.partition("{completion}")[0].replace("{question}", q)) for q in questions]
        enc = self.tokenizer([text for text, _ in built], add_special_tokens=self.add_special_tokens,
                             return_offsets_mapping=True)
        out = []
        for (text, ends), ids, offsets, first in zip(built, enc["input_ids"], enc["offset_mapping"], starts):
            owner = _owner_of_chars(offsets, len(text))
            start = next((owner[c] for c in range(first, len(text)) if owner[c] >= 0), len(ids) - 1)
            positions = []
            for c in ends:
                while c >= 0 and owner[c] < 0:  # a character the tokenizer dropped: read the token before
                    c -= 1
                positions.append(owner[c] if c >= 0 else len(ids) - 1)
            out.append((list(ids), positions, start))
        return out

    def encode(self, question: str, completion: str) -> tuple[list[int], list[int]]:
        """(token ids, token index of each step's score) for one question and completion."""
        return self.encode_many([question], [completion])[0]

    # --- scoring ---------------------------------------------------------------------

    def _read_scores(self, logits, rows, positions):
        """P(step correct) at the given (row, position) pairs of a [B, T, *] logits tensor."""
        import torch

        picked = logits[rows, positions].float()  # [n_steps, num_labels or V]
        if self.format == "token":
            two = picked[:, list(self.label_ids)]  # [n_steps, 2]: good, bad
            return torch.softmax(two, dim=-1)[:, 0]
        if picked.shape[-1] == 1:
            return torch.sigmoid(picked[:, 0])
        return torch.softmax(picked, dim=-1)[:, 1]

    def token_logprobs(self, ids, encoded) -> tuple[list[list[float]], int]:
        """Per row: log p(token t | tokens before t) for t = max(start, 1) .. len - 1, the completion's
        tokens and what the template puts after them; and how many positions the LM head ran on.

        ids [B, T] right-padded (`_right_padded`), encoded: `_encode`'s rows. One forward of the
        decoder body; the LM head and the log-softmax run only at the positions that predict
        those tokens (t - 1), not at the question's or the padding's.
        """
        import torch

        lm = self.model
        body = lm.get_decoder() if hasattr(lm, "get_decoder") else lm.model
        hidden = body(input_ids=ids, use_cache=False).last_hidden_state  # [B, T, d]
        rows: list[int] = []
        cols: list[int] = []
        counts = []
        for r, (tokens, _, start) in enumerate(encoded):
            lo = max(start, 1)
            counts.append(max(len(tokens) - lo, 0))
            rows += [r] * counts[-1]
            cols += range(lo - 1, lo - 1 + counts[-1])
        at = (torch.tensor(rows, device=ids.device), torch.tensor(cols, device=ids.device))
        logits = lm.get_output_embeddings()(hidden[at]).float()  # [R, V]
        lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[at[0], at[1] + 1][:, None])[:, 0].tolist()
        out, k = [], 0
        for n in counts:
            out.append(lp[k: k + n])
            k += n
        return out, len(rows)

    @staticmethod
    def step_features(token_lps: Sequence[Sequence[float]], encoded) -> list[float]:
        """Per step: the lowest teacher-forced log-prob of any completion token up to its end.

        The last step runs to the end of the input, so a template that closes the completion with
        an end token (`...{completion}<|endoftext|>`) makes "the solution is complete" part of
        the last step's score: a truncated answer is unlikely to end there.

        token_lps: `token_logprobs`' rows (row r's entry i is token max(start, 1) + i). The running
        minimum makes step k's feature "every token so far was plausible", matching the label
        "every step so far is correct".
        """
        out: list[float] = []
        for lps, (tokens, pos, start) in zip(token_lps, encoded):
            first = lo = max(start, 1)
            running = float("inf")
            for k, p in enumerate(pos):
                if k == len(pos) - 1:
                    p = len(tokens) - 1  # the last step also answers for what follows it (e.g. an end token)
                if p >= lo:
                    running = min(running, min(lps[lo - first: p - first + 1]))  # tokens lo..p
                    lo = p + 1
                out.append(running if running != float("inf") else 0.0)
        return out

    def features(self, questions: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        """logprob format: the raw per-step features (before calibration), e.g. to fit the calibration."""
        import torch

        if self.format != "logprob":
            raise RaceError(f"PRM features exist for format 'logprob', not {self.format!r}.")
        encoded = self._encode(questions, completions)
        device = next(self.model.parameters()).device
        out: list[list[float]] = []
        with torch.no_grad():
            for b in range(0, len(encoded), self.batch_size):
                chunk = encoded[b: b + self.batch_size]
                ids = self._right_padded([tokens for tokens, _, _ in chunk]).to(device)
                flat = iter(self.step_features(self.token_logprobs(ids, chunk)[0], chunk))
                out += [[next(flat) for _ in pos] for _, pos, _ in chunk]
        return out

    def _right_padded(self, rows: Sequence[Sequence[int]]):
        """Token rows -> [n, longest] ids, right-padded. Under plain causal attention no real token
        sees the padding after it, so the forwards need no padding mask (SDPA runs its causal kernel)."""
        import torch

        ids = torch.full((len(rows), max(len(r) for r in rows)), self.pad_id, dtype=torch.long)
        for r, tokens in enumerate(rows):
            ids[r, : len(tokens)] = torch.tensor(tokens)
        return ids

    def _logprob_scores(self, token_lps, encoded) -> list[float]:
        """logprob format: sigmoid(scale * feature + bias), with the calibration fitted on labelled steps."""
        cal = getattr(self.model.config, "prm_calibration", None) or {"scale": 1.0, "bias": 0.0}
        return [1.0 / (1.0 + math.exp(-(cal["scale"] * f + cal["bias"])))
                for f in self.step_features(token_lps, encoded)]

    def score_detailed(self, questions: Sequence[str], completions: Sequence[str]) -> Scored:
        """Per-step scores of every completion and what the forwards cost (see `Scored`)."""
        if len(questions) != len(completions):
            raise RaceError(f"PRM scoring got {len(questions)} questions but {len(completions)} completions; "
                            "pass the question of every completion (repeat it for each rollout of a group).")
        start = time.perf_counter()
        encoded = self._encode(questions, completions)
        seq_lens = [len(ids) if pos else 0 for ids, pos, _ in encoded]
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()  # no dropout while scoring; the caller's mode is restored below
        try:
            return self._forward_batches(encoded, seq_lens, device, start)
        finally:
            self.model.train(was_training)

    def _forward_batches(self, encoded, seq_lens, device, start) -> Scored:
        import torch

        from race_cli.cost.flops import Flops, reward_model_flops

        scores: list[list[float]] = [[] for _ in encoded]
        todo = sorted((i for i, (_, pos, _) in enumerate(encoded) if pos), key=lambda i: seq_lens[i])
        batch_lens, padded, flops = [], [], []
        # the two-layer Qwen2.5-Math-PRM head vs one Linear (transformers' *ForTokenClassification)
        head = ("classifier" if _two_layer_head(self.model) else "scalar") if self.format == "classifier" else "token"
        for b in range(0, len(todo), self.batch_size):
            idx = todo[b: b + self.batch_size]
            lens = [seq_lens[i] for i in idx]
            width = max(lens)
            ids = self._right_padded([encoded[i][0] for i in idx])
            rows, cols = [], []
            for r, i in enumerate(idx):
                rows += [r] * len(encoded[i][1])
                cols += encoded[i][1]
            head_positions = None  # every position (the heads of the other formats run on all of them)
            with torch.no_grad():
                if self.format == "logprob":
                    token_lps, head_positions = self.token_logprobs(ids.to(device), [encoded[i] for i in idx])
                    values = self._logprob_scores(token_lps, [encoded[i] for i in idx])
                else:
                    logits = score_logits(self.model, ids.to(device))  # [B, T, num_labels or V]
                    values = self._read_scores(logits, torch.tensor(rows, device=logits.device),
                                               torch.tensor(cols, device=logits.device)).tolist()
            k = 0
            for i in idx:
                n = len(encoded[i][1])
                scores[i] = values[k: k + n]
                k += n
            batch_lens.append(lens)
            padded.append(width)
            flops.append(reward_model_flops(self.arch, lens, padded_len=width, head=head,
                                            num_labels=max(self.num_labels, 1), executed_head_positions=head_positions))
        return Scored(step_scores=scores, seq_lens=seq_lens, batch_seq_lens=batch_lens, padded_lens=padded,
                      flops=sum(flops, Flops()), seconds=time.perf_counter() - start)

    def score(self, questions: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        """Per-step P(step correct) for every completion ([] for a completion with no steps)."""
        return self.score_detailed(questions, completions).step_scores

    def reward(self, questions: Sequence[str], completions: Sequence[str], golds: Sequence[str], *,
               outcome_weight: float = 0.0, how: str | None = None,
               use_math_verify: bool = False) -> tuple[list[float], dict]:
        """Rewards (1 - w) * aggregate(step scores) + w * rule_reward(completion, gold), w = outcome_weight.

        Returns (rewards, info) with info keys: step_scores, prm (aggregated), outcome (rule
        rewards), seq_lens (real tokens per completion, 0 when not scored), batch_seq_lens and
        padded_lens (per forward batch), flops (race_cli.cost.flops.Flops), seconds (whole call).
        """
        start = time.perf_counter()
        how = self.aggregation if how is None else how
        problems = []
        if isinstance(outcome_weight, bool) or not isinstance(outcome_weight, (int, float)) \
                or not 0.0 <= outcome_weight <= 1.0:
            problems.append(f"outcome_weight={outcome_weight!r}: expected a number in [0, 1] "
                            "(0 = PRM only, 1 = rule-based outcome only).")
        if how not in AGGREGATIONS:
            problems.append(f"PRM aggregation {how!r} is unknown; expected one of {', '.join(AGGREGATIONS)}.")
        if len(golds) != len(completions):
            problems.append(f"PRM reward got {len(completions)} completions but {len(golds)} gold answers.")
        if problems:
            raise RaceError(*problems)
        scored = self.score_detailed(questions, completions)
        prm = [aggregate(s, how) for s in scored.step_scores]
        outcome = [rule_reward(c, g, use_math_verify=use_math_verify) for c, g in zip(completions, golds)]
        rewards = [(1.0 - outcome_weight) * p + outcome_weight * o for p, o in zip(prm, outcome)]
        info = {"step_scores": scored.step_scores, "prm": prm, "outcome": outcome,
                "seq_lens": scored.seq_lens, "batch_seq_lens": scored.batch_seq_lens,
                "padded_lens": scored.padded_lens, "flops": scored.flops,
                "seconds": time.perf_counter() - start}
        return rewards, info
