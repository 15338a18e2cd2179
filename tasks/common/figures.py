"""The plot layer of the results pipeline: matplotlib helpers for the paper's figures (PNG). Table
specs with `kind: figure` name a plot function `(runs: DataFrame, spec: dict, out_dir: Path) ->
str` (`make tables` calls it through run_plot_hook); `curves.draw` is generic.

Every figure is written by `save`: its title names the profile and the budget of the runs drawn
(`drawing(runs)` says which: the table builder and `make plots` set it), and a CSV of every
plotted point (panel, line, x, y) lies beside the PNG, so a figure never reads like the paper's
and its numbers can be read without the picture."""
from __future__ import annotations

import importlib
import shutil
import tempfile
import textwrap
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


# The tables' † on a figure: a grey cross on a point (a best-over-grid point, or a learning curve's
# last point) that rests on a run of an older config than today's; the label is a legend entry
OLDER = "† older config (make status; a rerun retrains it)"
OLDER_MARK = dict(marker="x", markersize=8, color="0.35", linestyle="none")


def legend_outside(axes, at, fontsize: float = 7) -> None:
    """One legend for all `axes` (each label once), right of the axis `at`: inside a panel it
    would hide the curves."""
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    if handles:
        at.legend(handles.values(), handles.keys(), fontsize=fontsize, loc="upper left",
                  bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


_RUNS: list = [None, None]  # the runs of the figure being drawn and the reference runs (drawing())


@contextmanager
def drawing(runs: pd.DataFrame, reference: pd.DataFrame | None = None):
    """The figures saved inside come from `runs` (columns profile and global_step, or the curve
    points' profile / run_id / step): their titles say which profile and budget. `reference`:
    the committed reference runs of the same profile, for hooks that show them (Table 4)."""
    _RUNS[:] = [runs, reference]
    try:
        yield
    finally:
        _RUNS[:] = [None, None]


def reference_runs() -> pd.DataFrame | None:
    """The reference runs handed to drawing() (None when building the reference itself)."""
    return _RUNS[1]


def budget(runs: pd.DataFrame | None) -> str:
    """'profile smoke, 192 steps' / 'profile cpu, 160-1500 steps' ('' without runs)."""
    if runs is None or runs.empty or "profile" not in runs:
        return ""
    profiles = ", ".join(sorted(map(str, set(runs["profile"].dropna()))))
    if "global_step" in runs:
        steps = runs["global_step"].dropna()
    elif {"run_id", "step"} <= set(runs.columns):
        steps = runs.groupby("run_id")["step"].max().dropna()
    else:
        steps = pd.Series(dtype=float)
    if steps.empty:
        return f"profile {profiles}"
    lo, hi = int(steps.min()), int(steps.max())
    return f"profile {profiles}, {lo if lo == hi else f'{lo}-{hi}'} steps"


def points(fig) -> pd.DataFrame:
    """Every plotted point: panel (the axes title), line (its legend label), x, y."""
    rows = []
    for ax in fig.axes:
        for line in ax.get_lines():
            label = str(line.get_label())
            label = "" if label.startswith("_") else label  # matplotlib's unnamed lines
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                rows.append({"panel": ax.get_title(), "line": label, "x": x, "y": y})
    return pd.DataFrame(rows, columns=["panel", "line", "x", "y"])


def save(fig, out: Path) -> Path:
    """The PNG with the profile and budget in its title, and `<name>.csv` of its points."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stamp = budget(_RUNS[0])
    title = " ".join([fig.get_suptitle()] + [ax.get_title() for ax in fig.axes])
    if stamp and stamp not in " ".join(title.split()):  # the learning curves stamp (and wrap) their own
        # the figure's title, else the (single) axes' title; the suptitle's Text is one of
        # fig.texts (fig.suptitle() again would reset its font size)
        sup = next((t for t in fig.texts if t.get_text() == fig.get_suptitle()), None)
        if sup is not None and sup.get_text():
            sup.set_text(f"{sup.get_text()} ({stamp})")
        elif fig.axes:
            ax = fig.axes[0]
            size = ax.title.get_fontsize()
            fits = int(fig.get_figwidth() * 72 / (0.55 * size))  # characters across the figure
            ax.set_title(textwrap.fill(f"{ax.get_title()} ({stamp})" if ax.get_title() else stamp,
                                       fits), fontsize=size)  # wrapped: never cut at the edge
    points(fig).to_csv(out.with_suffix(".csv"), index=False)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


_save = save  # the name the plot modules import


def run_plot_hook(spec: dict, df: pd.DataFrame, root: Path, profile: str, sources: dict,
                  ref: pd.DataFrame) -> dict:
    """(tables.make, for a spec of kind: figure) A plot hook gets a scratch `figures/` dir (Table 4's writes its table to ../tables/);
    what it writes is then moved into figures/<profile>/ and tables/<profile>/."""
    mod, fn = spec["plot"].rsplit(".", 1)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".plot-", dir=root, ignore_cleanup_errors=True) as tmp:
        scratch = Path(tmp)
        (scratch / "figures").mkdir()
        with drawing(df, None if ref.empty else ref):  # titles: the runs' profile and budget
            getattr(importlib.import_module(mod), fn)(df, spec, scratch / "figures")
        moved = []
        for kind in ("figures", "tables"):
            for f in sorted((scratch / kind).glob("*")) if (scratch / kind).is_dir() else []:
                dest = root / kind / profile / f.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                if f.suffix == ".md":  # hook-written tables state their sources too
                    f.write_text(f.read_text().rstrip("\n") + "\n\n" + "".join(
                        f"- {k}: {v}\n" for k, v in sources.items()))
                shutil.move(str(f), dest)
                moved.append(str(dest))
    pngs = [m for m in moved if m.endswith(".png")]
    mds = [m for m in moved if m.endswith(".md")]  # a hook-written table: name its .md
    return {("figure" if pngs else "table"): (pngs or mds or moved or [None])[0], "files": moved}
