"""Figure 4 from the framework's result JSONs: training and validation loss vs update per mixer."""
from __future__ import annotations

from pathlib import Path

import pandas as pd


def fig4(df: pd.DataFrame, spec: dict, out_dir: Path) -> str:
    """`plot:` function of conf/table/fig4.yaml: (runs frame, table spec, out dir) -> PNG path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tasks.common.figures import save
    out = Path(out_dir) / f"{spec.get('name', 'fig4')}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for row, g in (df.groupby("row", sort=False) if not df.empty else []):
        hist = pd.DataFrame(g.iloc[0]["history"])
        for ax, key in zip(axes, ("train/loss", "val/loss")):
            if key in hist:
                ax.plot(hist["step"], hist[key], label=str(row))
    for ax, title in zip(axes, ("training loss", "validation loss")):
        ax.set_xlabel("update")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("loss (nats / token)")
    if not df.empty:
        axes[1].legend(fontsize=8)
    local = _local_data(df)
    fig.suptitle(f"Figure 4: loss on {local}, not OpenWebText2" if local
                 else spec.get("title", "Figure 4"))
    return str(save(fig, out))  # + profile/budget in the title, the points' CSV


def _local_data(df: pd.DataFrame) -> str:
    """What the runs trained on when it is a local text folder (WikiText-2 bytes at the smoke
    profile, `task.datamodule.data.path=`): the title must not say OpenWebText2 then."""
    if df.empty or "datamodule" not in df:
        return ""
    dm = df.iloc[0]["datamodule"] or {}
    data, tok = dm.get("data") or {}, (dm.get("tokenizer") or {}).get("name", "?")
    if data.get("source") != "local":
        return ""
    return f"{Path(str(data.get('path'))).name} ({tok} tokens)"
