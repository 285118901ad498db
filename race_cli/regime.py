"""What a regime and a condition are: the two keys that plan, run and report group jobs by, in one place.

- A *regime* is a job's overrides less its seed's: the jobs of one regime differ only in their seed
  (DESIGN.md "The grid"), so race plan solves its budget once, the power table counts its seeds and a race
  adds seeds to it.
- A *condition* is (model, budget, reward system, task): its regimes split the same budget differently, and
  the report ranks them against each other (DESIGN.md "Ranking regimes").

The seed's override is `seed=`, `+seed=` or `++seed=`: of Hydra's key prefixes (`+` add, `++` add or
override, `~` delete) a job carries only the first two, since config/sweep refuses deleting a key (every key
of the schema is needed) and race plan refuses `~seed=0,1` when it composes it. A `~seed` token is therefore
no seed of a regime: kept in its key, it is refused with Hydra's own message where the job is composed.
No torch, no pandas.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

SEED_PREFIXES = ("seed=", "+seed=", "++seed=")  # the seed's override, as typed with Hydra's add prefixes


def override_key(token: str) -> str:
    """The key an override sets, less Hydra's add prefix: `++seed=3`, `+seed=3` and `seed=3` all set `seed`."""
    key = token.partition("=")[0]
    return key[2:] if key.startswith("++") else key[1:] if key.startswith("+") else key


def is_seed(token: str) -> bool:
    """Whether an override sets the seed (seed=, +seed=, ++seed=)."""
    return token.startswith(SEED_PREFIXES)


def regime_key(overrides: Iterable[str]) -> tuple[str, ...]:
    """A job's overrides less its seed's, in their order: the jobs of one regime share it. race plan writes
    every job's overrides in one order (the fixed ones, then the axes), so the order separates no regime."""
    return tuple(o for o in overrides if not is_seed(o))


def condition_key(config: Mapping[str, Any]) -> tuple[str, float, str, str]:
    """(model, budget FLOPs, reward system, task) of a composed job config: the jobs whose regimes compete."""
    from race_cli.cost.budget import reward_name

    return (config["model"]["name"], float(config["budget"]["flops"]), reward_name(config), config["task"]["name"])
