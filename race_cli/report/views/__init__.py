"""Views of a Report (report/build.py): the files' texts, the console, stdout, the top `race run` prints.

Pure formatting of values the Report holds: nothing here computes a statistic or touches a file
(report/command.py writes the texts and draws the figures). The section renderers, in this package: render.py
(rankings, summary.md, report.json), joint.py (the joint comparison), frontier.py, curve.py (the predictions at
--at-budget), validation.py with predicted.py (a validation sweep's), plots.py (the figures).
A view imports the report's records (report/records.py), its words and number formats, and other views: never
a module that computes (tests/test_layers.py holds it).
"""

from __future__ import annotations

from race_cli.io import dumps

# the files a report writes, besides the figures (views/plots.py, views/frontier.py, views/joint.py); frontier.csv
# and joint.csv are removed when this report has none (one from an earlier report would mislead)
MAIN_FILES = ("runs.csv", "ranking.csv", "recommendations.csv", "report.json", "summary.md", "frontier.csv",
              "joint.csv")
VALIDATION_FILES = ("validation.md", "validation.csv", "validation_regimes.csv", "validation.json")


def figure_names() -> set[str]:
    """Every figure a report may draw (a figure it does not draw this time is removed: it would mislead)."""
    from race_cli.report.views import joint as JV
    from race_cli.report.views import frontier as F
    from race_cli.report.views.plots import PLOT_NAMES  # module top imports no matplotlib

    return set(PLOT_NAMES) | set(F.PLOTS) | {JV.JOINT_PLOT}


def touched_names(rep) -> set[str]:
    """Every file name this report writes or removes in its folder: command.py checks each path before it
    writes any."""
    return (set(MAIN_FILES) | figure_names() | ({"predictions.csv"} if rep.predictions is not None else set())
            | (set(VALIDATION_FILES) if rep.validation is not None else set()))


# --- files -------------------------------------------------------------------------------------------


def race_markdown(rep) -> list[str]:
    """summary.md's race section: the schedule, then per (target, condition) its state record."""
    from race_cli.report import words as W
    from race_cli.report.views.render import md_table

    if rep.race is None:
        return []
    head = ["condition", "state", "look", "seeds", "α spent", "continue", "next seeds", "margin", "in words"]
    rows = [[st.condition, st.state, str(st.look), ", ".join(f"{g}: {n}" for g, n in st.seeds.items()) or "–",
             f"{st.alpha_spent:.4g}", ", ".join(st.active) or "–",
             "–" if st.next_seeds is None else str(st.next_seeds), W.margin_text(st.margin), W.race_state(st)]
            for st in rep.race]
    return ["## Race", "", W.race_schedule(rep.schedule), "", md_table(head, rows), ""]


def _sections(rep) -> list[str]:
    """summary.md's sections after the rankings: a raced sweep's states, the frontier across budgets, the
    predictions."""
    from race_cli.report.records import CURVE_DRAWS
    from race_cli.report.views import curve as CV
    from race_cli.report.views import frontier as F

    sections = race_markdown(rep)
    sections += F.markdown_section(rep.frontier) if len(rep.frontier.best) else []
    if rep.predictions is not None:
        sections += CV.markdown_section(rep.predictions, CURVE_DRAWS)
    return sections


def markdown(rep, figs: list[str]) -> str:
    """summary.md (figs: the figures drawn, linked at its end)."""
    from race_cli.report.views import joint as JV
    from race_cli.report.views import render

    return render.markdown_summary(rep, figs, _sections(rep), joint=JV.markdown(rep.joint))


def report_json(rep) -> str:
    """report.json: every table in one document; a raced sweep's adds `race` (per target and condition its
    state record, stats/race.RaceState.to_json: the file contract `race run` and outside checks read) and
    `race_schedule`."""
    from race_cli.report.views import joint as JV
    from race_cli.report.views import render

    front = rep.frontier
    return render.to_json(rep, joint=JV.to_json(rep.joint),
                          extra={"budget_frontier": front.best, "budget_frontier_notes": front.sentences}
                          | ({"predictions": rep.predictions} if rep.predictions is not None else {})
                          | ({"race": [st.to_json() for st in rep.race], "race_schedule": rep.schedule.to_json()}
                             if rep.race is not None else {}))


def file_texts(rep, figs: list[str]) -> dict[str, str]:
    """{file name: text} of the main report, in the order they are written and listed."""
    from race_cli.report.views import joint as JV

    texts = {"runs.csv": rep.jobs.to_csv(index=False), "ranking.csv": rep.ranking.to_csv(index=False),
             "recommendations.csv": rep.recommendations.to_csv(index=False), "report.json": report_json(rep),
             "summary.md": markdown(rep, figs)}
    if len(rep.frontier.table):
        texts["frontier.csv"] = rep.frontier.table.to_csv(index=False)
    if rep.predictions is not None:
        texts["predictions.csv"] = rep.predictions.to_csv(index=False)
    if len(rep.joint.ranking):
        texts[JV.JOINT_CSV] = rep.joint.ranking.to_csv(index=False)
    return texts


def validation_texts(rep) -> dict[str, str]:
    """A validation sweep's files (validation.md, .csv, _regimes.csv, .json); {} for an ordinary sweep."""
    import pandas as pd

    from race_cli.report.views.validation import markdown as validation_md

    res = rep.validation
    if res is None:
        return {}
    cond_cols = list(dict.fromkeys(k for c in res.conditions for k in c))  # pending rows have fewer
    return {"validation.md": validation_md(res),
            "validation.csv": pd.DataFrame(res.conditions, columns=cond_cols).to_csv(index=False),
            "validation_regimes.csv": res.regimes.to_csv(index=False),
            "validation.json": dumps(res.to_json())}


# --- console and stdout ------------------------------------------------------------------------------


def print_console(rep, console, main: list[str], validation: list[str]) -> None:
    """--format table: the report on a rich console, then where its files went (main: the main report's
    file names, figures included; validation: a validation sweep's)."""
    from race_cli.report.views import joint as JV
    from race_cli.report.views import render
    from race_cli.report.views import frontier as F

    full, front, pred = rep.options.full, rep.frontier, rep.predictions
    render.print_report(console, rep, joint=lambda c: JV.print_joint(c, rep.joint))
    if full and len(front.best):
        F.print_section(console, front)
    if full and pred is not None:
        from race_cli.report.records import CURVE_DRAWS
        from race_cli.report.views import curve as CV

        CV.print_section(console, pred, CURVE_DRAWS)
    if not full:
        console.print("Below the findings, summary.md has, in order: the rankings per target and condition, "
                      "the joint comparison, the frontier across budgets"
                      + (", the predictions" if pred is not None else "") + ", the figures. "
                      "race report --full prints them here.", highlight=False)
    console.print(f"Wrote {', '.join(main)} to {rep.out_dir}")
    if rep.validation is not None:
        from race_cli.report.views.validation import print_validation

        print_validation(console, rep.validation)
        console.print(f"Wrote {', '.join(validation)} to {rep.out_dir}")


def write_stdout(rep, texts: dict[str, str], main: list[str], vtexts: dict[str, str], out, err) -> None:
    """--format csv | json | markdown: that file's text on stdout (a validation's markdown after it), where
    the files went on stderr."""
    out.write({"csv": texts["ranking.csv"], "json": texts["report.json"], "markdown": texts["summary.md"]}
              [rep.options.fmt])
    err.write(f"Wrote {', '.join(main)} to {rep.out_dir}\n")
    if vtexts:
        if rep.options.fmt == "markdown":
            out.write("\n" + vtexts["validation.md"])
        err.write(f"Wrote {', '.join(vtexts)} to {rep.out_dir}\n")


# --- the top of the ranking, what `race run` prints at its end -----------------------------------------

TOP_SHOWN = 3  # regimes per condition printed at the end (the report has them all)
TOP_LEFT_OUT = ("search / learning / feedback", "budget spent", "policy split", "best share")  # only in the files


def _wrapped(text: str, width: int) -> str:
    """A sentence folded at the console's width between words (a path or a number is never split), as
    rich folds the tables above it: in a pipe without COLUMNS, 80."""
    import textwrap

    return textwrap.fill(text, width=max(width, 40), break_long_words=False, break_on_hyphens=False)


def print_top(rep, console, say) -> None:
    """The findings, the top of each condition's ranking (its heading, its no-gain note through `say`, its
    table) and the joint comparison's line per budget, then where the full report is. The console is a
    terminal's own width, COLUMNS where set, else (a pipe, a log) rich's 80 columns, as `race report`
    prints: the narrow table then (the files have every column)."""
    from rich.table import Table

    from race_cli.report.views.render import (NARROW, NARROW_HEAD, RANK_HEAD, condition_heading, narrow_rows,
                                        print_findings, ranking_rows)

    print_findings(console, rep.findings or [])  # race run's end opens with the findings
    ranking, rec = rep.ranking, rep.recommendations
    no_gain = dict(zip(rec["condition"], rec["no_gain"])) if "no_gain" in rec else {}
    if len(ranking):
        for cond, g in ranking.groupby("condition", sort=False):
            console.print(f"[bold]top of the ranking: {condition_heading(cond, g)}[/]", highlight=False)
            if no_gain.get(cond):  # a ranking that is not a finding must not read like one
                say(_wrapped(no_gain[cond], console.width))
            t = Table()
            if console.width < NARROW:  # an 80-column terminal: the columns that fit, none cut
                for h in NARROW_HEAD:
                    t.add_column(h, justify="left" if h == "regime" else "right", overflow="fold")
                for row in narrow_rows(g.head(TOP_SHOWN)):
                    t.add_row(*row)
                console.print(t)
                continue
            keep = [i for i, h in enumerate(RANK_HEAD) if h not in TOP_LEFT_OUT]
            for i in keep:
                t.add_column(RANK_HEAD[i], justify="left" if RANK_HEAD[i] == "regime" else "right")
            for row in ranking_rows(g.head(TOP_SHOWN)):
                t.add_row(*[row[i] for i in keep])
            console.print(t)
    for line in rep.joint.per_budget:  # the paper's question at the sweep's own budgets
        if line["checkpoint"] >= 1.0:
            say(_wrapped("joint comparison, " + line["text"], console.width))
    say(_wrapped(f"full report: {rep.out_dir / 'summary.md'} (and "
                 f"{', '.join(f for f in rep.files if f != 'summary.md')})", console.width))
