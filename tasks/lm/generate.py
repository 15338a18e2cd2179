"""Sample from a trained LM: a framework checkpoint of a Table 2 / Figure 4 run.

With a stateful mixer (ZeroS) the prompt is read once (parallel prefill, return_state=True) and
every new token is one T==1 step on the recurrent state: constant memory and time per token.
Mixers without state fall back to re-running the whole prefix for every token.

  python -m tasks.lm.generate --ckpt outputs/runs/table2/<run_id>/checkpoints/best.ckpt
  make generate CKPT=outputs/runs/table2/<run_id>/checkpoints/best.ckpt PROMPT="The"
The model and tokenizer configs come from the run's result JSON (results/runs/<table>/<run_id>.json,
found from the checkpoint's run folder, or given with --run-json).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from tasks.common.errors import ConfigError
from zeros.mixers import MixerSpec

from .model import LanguageModel, build_lm
from .tokenizer import load_tokenizer


def _run_json_for(ckpt: Path) -> Path:
    """outputs/runs/<table>/<run_id>/checkpoints/x.ckpt -> results/runs/<table>/<run_id>.json, or
    results/runs/adhoc/<table>/<run_id>.json for an ad-hoc run of that table (provenance.py)."""
    run_dir = ckpt.resolve().parents[1]
    runs = run_dir.parents[3] / "results" / "runs"
    table, name = run_dir.parent.name, f"{run_dir.name}.json"
    protocol, adhoc = runs / table / name, runs / "adhoc" / table / name
    return adhoc if adhoc.is_file() and not protocol.is_file() else protocol


def load_checkpoint(path, device="cpu", run_json=None):
    """A framework (Lightning) checkpoint of the LM task -> (model, tokenizer)."""
    if not Path(path).is_file():
        raise ConfigError(f"no checkpoint {path}: pass --ckpt outputs/runs/<table>/<run_id>/"
                          "checkpoints/best.ckpt of a finished LM run")
    run_json = Path(run_json) if run_json else _run_json_for(Path(path))
    if not run_json.is_file():
        raise ConfigError(f"no result JSON {run_json} for {path}: pass --run-json "
                          "results/runs/<table>/<run_id>.json of that run")
    cfg = json.loads(run_json.read_text())["config"]
    backbone = {k: v for k, v in cfg["backbone"].items() if k != "_target_"}
    model = build_lm(MixerSpec(cfg["mixer"]["name"], cfg["mixer"].get("kwargs") or {}),
                     **backbone)
    state = torch.load(path, map_location=device, weights_only=False)["state_dict"]
    model.load_state_dict({k[len("model."):]: v for k, v in state.items()
                           if k.startswith("model.")})
    tok = cfg["task"]["datamodule"]["tokenizer"]
    tokenizer = load_tokenizer(tok["name"], tok.get("path"), hub_id=tok.get("hub_id") or "gpt2")
    return model.to(device).eval(), tokenizer


def _sample(logits, temperature, top_k, gen):
    """logits [B, V] -> ids [B]. temperature 0 = greedy."""
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=gen)[:, 0]


@torch.no_grad()
def generate(model: LanguageModel, prompt: torch.Tensor, n_new: int, *, temperature=1.0,
             top_k=None, generator=None, use_state: bool | None = None):
    """prompt [B, T0] ids -> (ids [B, T0+n_new], step_logits [B, n_new, V]): step_logits[:, i]
    is the distribution the (T0+i)-th token was sampled from."""
    use_state = model.stateful if use_state is None else use_state
    ids, outs = prompt, []
    if use_state:
        logits, state = model(prompt, return_state=True)  # prefill: [B, T0, V]
        for _ in range(n_new):
            outs.append(logits[:, -1])
            nxt = _sample(logits[:, -1], temperature, top_k, generator)  # [B]
            ids = torch.cat([ids, nxt[:, None]], 1)
            logits, state = model(nxt[:, None], state=state)  # one step: [B, 1, V]
    else:
        for _ in range(n_new):
            last = model(ids)[:, -1]  # [B, V] re-reads the whole prefix
            outs.append(last)
            ids = torch.cat([ids, _sample(last, temperature, top_k, generator)[:, None]], 1)
    return ids, torch.stack(outs, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True, help="a Lightning .ckpt of an LM run")
    ap.add_argument("--run-json", default=None, help="result JSON of a Lightning checkpoint")
    ap.add_argument("--prompt", default="")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    try:
        model, tok = load_checkpoint(a.ckpt, a.device, a.run_json)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ids = [tok.eos_id] + tok.encode(a.prompt)  # eos = start of a unit, as in training
    gen = torch.Generator(device=a.device).manual_seed(a.seed)
    out, _ = generate(model, torch.tensor([ids], device=a.device), a.tokens,
                      temperature=a.temperature, top_k=a.top_k, generator=gen)
    print(tok.decode(out[0, 1:].tolist()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
