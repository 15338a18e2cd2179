"""`make verdicts [PROFILE=cpu]`: one verdict per claim of the paper (conf/claims.yaml) from the runs.

    python -m tasks.common.verdicts --profile cpu            # results/reference/runs -> results/reference/verdicts.{md,csv}
    python -m tasks.common.verdicts --profile cpu --root results   # your runs -> results/verdicts.{md,csv}

Cells are the tables' own (tables.runs_frame + build_table over conf/table/<table>.yaml with the
claim's columns): best over the lr/wd grid, mean ± std over seeds, `rising` for a run that ended
at its cap still improving (convergence.py). Each claim gets one verdict: holds / does not hold
at this budget / undecided (a rising cell; a gap close to the claim's boundary with fewer than
`min_seeds` seeds, or within the seed spread) / not tested (a row without runs at this profile).
docs/verdicts.md says how a claim is phrased and tested.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import yaml

from .errors import ConfigError, cli_parser, fail
from .protocol import at_profile, load_spec, profile_reason, runs_frame
from .store import CONF, ROOT
from .table import build_table, cell_steps, current_runs

CLAIMS = CONF / "claims.yaml"
HOLDS, FAILS, UNDECIDED, UNTESTED = "holds", "does not hold at this budget", "undecided", "not tested"


def load_claims(path: Path = CLAIMS) -> dict:
    return yaml.safe_load(Path(path).read_text())


def claim_columns(spec: dict, claim: dict) -> list[dict]:
    """The claim's columns as column specs ({key, settings?, label}): a label names one of the
    table spec's columns; a dict is a column spec."""
    return [c if isinstance(c, dict) else next(
        (s for s in spec.get("columns", []) if isinstance(s, dict) and s.get("label") == c),
        {"key": c, "label": c}) for c in claim["columns"]]


def find_claim(claims: dict, cid: str) -> dict:
    claim = next((c for c in claims["claims"] if c["id"] == cid), None)
    if claim is None:
        raise ConfigError(f"unknown claim {cid!r}: use one of "
                          f"{', '.join(c['id'] for c in claims['claims'])} (conf/claims.yaml)")
    return claim


def _cells(df, spec: dict, claim: dict) -> tuple[dict, list]:
    """({(row, column label): cell}, column labels) by the table's own protocol, over the claim's
    columns; a cell is `older` when a run of its row and column is of an older config (df's
    `older` column, table.current_runs)."""
    cols = claim_columns(spec, claim)
    if claim.get("scale"):
        cols = [{**c, "scale": claim["scale"]} for c in cols]
    labels = [c.get("label", c["key"]) for c in cols]
    if df.empty:
        return {}, labels
    spec = {**spec, "columns": cols, "paper": None, "average": None, "extras": None}
    long = build_table(df, spec).dropna(subset=["ours"])
    flags = cell_steps(df, spec)  # the tables' † rule
    stale = set() if "older" not in flags else \
        set(map(tuple, flags.loc[flags["older"], ["row", "column"]].values))
    return {(r["row"], r["column"]): {"value": r["ours"], "std": r["ours_std"], "n": int(r["n_seeds"]),
                                      "rising": bool(r.get("rising") in (True,)),
                                      "older": (r["row"], r["column"]) in stale}
            for _, r in long.iterrows()}, labels


def signed_gap(a: float, b: float, mode: str) -> float:
    """How much better a is than b: points for mode max (cells in points), percent of b for min."""
    return a - b if mode == "max" else (b - a) / abs(b) * 100.0


def _se(a: dict, b: dict, mode: str) -> float | None:
    """Standard error of the gap from the two cells' seed spreads (None below 2 seeds a row)."""
    if a["n"] < 2 or b["n"] < 2:
        return None
    unit = 1.0 if mode == "max" else 100.0 / abs(b["value"])
    return unit * math.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"])


def judge(a: dict | None, b: dict | None, mode: str, boundary: float, rules: dict) -> tuple[str, str]:
    """(verdict, why) of "a better than b by more than `boundary`" (0: an ordering; -margin:
    'within margin'). Missing cell: not tested; a rising cell: undecided, never holds (a claim
    that fails while only b rises stays failed: b's further gain widens the gap)."""
    if a is None or b is None:
        return UNTESTED, "a row without runs at this profile"
    d = signed_gap(a["value"], b["value"], mode) - boundary
    if a["rising"] or (b["rising"] and d > 0):  # only a rising b cannot rescue a failing claim
        return UNDECIDED, "unconverged (↑)"
    se = _se(a, b, mode)
    if abs(d) < rules["close"] and min(a["n"], b["n"]) < rules["min_seeds"]:
        return UNDECIDED, f"close ({abs(d):.1f} from the boundary), {min(a['n'], b['n'])} seed(s): needs {rules['min_seeds']}"
    if se is not None and abs(d) <= rules["spread"] * se:
        return UNDECIDED, f"within the seed spread: gap {abs(d):.1f} <= {rules['spread']:g} SE = {rules['spread'] * se:.1f}"
    return (HOLDS, "") if d > 0 else (FAILS, "")


def combine(verdicts: list[str]) -> str:
    """A chain of pairs: every pair holds -> holds; one decided failure -> fails; else undecided;
    nothing testable -> not tested."""
    if all(v == UNTESTED for v in verdicts):
        return UNTESTED
    if FAILS in verdicts:
        return FAILS
    return HOLDS if all(v == HOLDS for v in verdicts) else UNDECIDED


def _pairs(claim: dict, cells: dict, column: str, spec_paper: dict, mode: str, rules: dict):
    """[(a_row, b_row, boundary, wording, versus)] of one claim at one column."""
    rows, versus = claim["rows"], claim.get("versus") or []
    kind = claim["kind"]
    if kind == "within":
        return [(rows[0], rows[1], -rules["margin"], f"{rows[0]} within {rules['margin']:g} of {rows[1]}", "")]
    if kind == "order" and not versus:
        return [(a, b, 0.0, f"{a} better than {b}", "") for a, b in zip(rows, rows[1:])]
    out = []
    for v in versus:
        a, b = rows[0], v
        if kind == "paper_order":
            pa, pb = (spec_paper.get(a) or {}).get(column), (spec_paper.get(v) or {}).get(column)
            if pa is None or pb is None:
                continue  # the paper gives no ordering to test
            g = signed_gap(pa, pb, mode)
            if abs(g) < rules["tie"]:
                out.append((a, b, -rules["margin"], f"{a} within {rules['margin']:g} of {b} (paper {pa:g} vs {pb:g})", v))
                continue
            a, b = (a, b) if g > 0 else (b, a)
            pa, pb = (pa, pb) if a == rows[0] else (pb, pa)
            out.append((a, b, 0.0, f"{a} better than {b} (paper {pa:g} vs {pb:g})", v))
        else:
            out.append((a, b, 0.0, f"{a} better than {b}", v))
    return out


def _cell_text(row: str, c: dict | None) -> str:
    if c is None:
        return f"{row} —"
    sd = f" ± {c['std']:.2g}" if c["n"] > 1 else ""
    return (f"{row} {c['value']:.4g}{sd}{' ↑' if c['rising'] else ''} ({c['n']} seed"
            f"{'s' if c['n'] > 1 else ''}){' †' if c.get('older') else ''}")


def frames(claims: dict, profile: str, root: Path) -> dict:
    """{table: its runs at the profile as its table reads them (table.current_runs: older-config
    runs marked, superseded ones dropped)}: each claimed table's JSONs read once."""
    return {t: current_runs(at_profile(runs_frame(root, t), profile), Path(root), t)
            for t in dict.fromkeys(c["table"] for c in claims["claims"])}


def evaluate(claims: dict, profile: str, root: Path, runs: dict | None = None) -> list[dict]:
    """One record per (claim, column, versus row): the claim's text, evidence, verdict; a cell
    resting on an older config's run carries †. `runs`: frames(), when the caller has them."""
    rules = {k: float(claims[k]) for k in ("close", "min_seeds", "spread", "tie", "margin")}
    rules["min_seeds"] = int(rules["min_seeds"])
    runs, out = runs or frames(claims, profile, root), []
    for claim in claims["claims"]:
        spec = load_spec(claim["table"])
        cells, labels = _cells(runs[claim["table"]], spec, claim)
        mode = spec.get("mode", "max")
        for col in labels:
            cmode = next((c.get("mode", mode) for c in spec.get("columns", [])
                          if isinstance(c, dict) and c.get("label") == col), mode)
            if claim["kind"] == "closer":
                out += _closer(claim, cells, col, cmode, rules)
                continue
            pairs = _pairs(claim, cells, col, spec.get("paper") or {}, cmode, rules)
            groups = [[p] for p in pairs] if claim.get("versus") else [pairs]
            for group in groups:
                judged = [judge(cells.get((a, col)), cells.get((b, col)), cmode, bd, rules)
                          for a, b, bd, _, _ in group]
                rows = list(dict.fromkeys(r for a, b, *_ in group for r in (a, b)))
                why = "; ".join(dict.fromkeys(w for _, w in judged if w))
                out.append(_record(claim, col, group[0][4], "; ".join(g[3] for g in group), rows,
                                   cells, combine([v for v, _ in judged]), why))
    return out


def _closer(claim, cells, col, mode, rules):
    a, ref = claim["rows"]
    out = []
    for v in claim["versus"]:
        ca, cr, cv = cells.get((a, col)), cells.get((ref, col)), cells.get((v, col))
        if None in (ca, cr, cv):
            verdict, why = UNTESTED, "a row without runs at this profile"
        elif ca["rising"] or cr["rising"] or cv["rising"]:  # a distance moves either way
            verdict, why = UNDECIDED, "unconverged (↑)"
        else:  # distances as two pseudo-cells: the nearer one is the "better"
            dist = lambda c: {**c, "value": abs(c["value"] - cr["value"])}  # noqa: E731
            verdict, why = judge(dist(ca), dist(cv), "min", 0.0, rules)
        out.append(_record(claim, col, v, f"{a} nearer {ref} than {v}", [a, ref, v], cells, verdict, why))
    return out


def _record(claim, col, versus, wording, rows, cells, verdict, why) -> dict:
    cs = [cells.get((r, col)) or {} for r in rows]  # {}: a row without runs
    return {"claim": claim["id"], "table": claim["table"], "column": col,
            "text": claim["text"].format(column=col, versus=versus or ""), "tested": wording,
            "evidence": "; ".join(_cell_text(r, c or None) for r, c in zip(rows, cs)),
            "seeds": "/".join(str(c.get("n", 0)) for c in cs),
            "converged": "no" if any(c.get("rising") for c in cs) else "—" if {} in cs else "yes",
            "verdict": verdict, "why": why,
            "config": "older" if any(c.get("older") for c in cs) else "current"}


def render(records: list[dict], profile: str) -> tuple[str, str]:
    """(markdown, csv) of the verdicts; deterministic (the committed file is compared byte for byte)."""
    counts = {v: sum(r["verdict"] == v for r in records) for v in (HOLDS, FAILS, UNDECIDED, UNTESTED)}
    older = [r for r in records if r.get("config") == "older"]
    tables = ", ".join(f"{t} {sum(r['table'] == t for r in older)}"
                       for t in dict.fromkeys(r["table"] for r in older))
    lines = [f"# Verdicts on the paper's claims, profile {profile}", "",
             "Generated by `make verdicts PROFILE=" + profile + "` from the runs (conf/claims.yaml, "
             "docs/verdicts.md); never edited by hand. Cells: mean ± std over seeds (accuracy in %, "
             "else the table's units); ↑ = unconverged (ended at its step cap still improving); "
             "† = trained by an older config than today's (today's would train another run: "
             f"`make status TABLE=<table> PROFILE={profile}`).", "",
             "Counts: " + ", ".join(f"{v}: {n}" for v, n in counts.items()), "",
             f"Verdicts resting on a run of an older config (†): {len(older)} of {len(records)}"
             + (f" ({tables})" if older else "") + ".", "",
             "| claim | tested | evidence | converged | verdict |", "|---|---|---|---|---|"]
    for r in records:
        why = f" ({r['why']})" if r["why"] else ""
        lines.append(f"| {r['text']} | {r['tested']} | {r['evidence']} | {r['converged']} | "
                     f"**{r['verdict']}**{why} |")
    table = pd.DataFrame(records, columns=list(records[0]) if records else ["claim"])
    return "\n".join(lines) + "\n", table.to_csv(index=False, lineterminator="\n")


def build(profile: str, root: Path, claims_path: Path = CLAIMS) -> tuple[str, str]:
    """(markdown, csv): what `make verdicts` writes."""
    return render(evaluate(load_claims(claims_path), profile, root), profile)


def write(profile: str, root: Path, claims_path: Path = CLAIMS) -> Path:
    md, table = build(profile, root, claims_path)
    stem = "verdicts" if profile == "cpu" else f"verdicts_{profile}"
    (root / f"{stem}.md").write_text(md)
    (root / f"{stem}.csv").write_text(table)
    return root / f"{stem}.md"


def main(argv=None) -> int:
    ap = cli_parser(__doc__)
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--root", default=str(ROOT / "results" / "reference"),
                    help="the folder whose runs/<table>/ are read and where verdicts.md goes")
    a = ap.parse_args(argv)
    root = Path(a.root)
    try:
        if reason := profile_reason(a.profile):
            raise ConfigError(reason)
        if not (root / "runs").is_dir():
            raise ConfigError(f"no runs folder {root / 'runs'}: train a table first or pass --root")
        print(f"verdicts [{a.profile}]: {write(a.profile, root)}")
    except ConfigError as e:
        return fail(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
