import random

import pytest

WORDS = ("the lobster river city music game season album war king team player battle song "
         "first second year church station film road north south island ship").split()


def make_corpus(n_lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for i in range(n_lines):
        if i % 7 == 0:
            lines.append("")  # WikiText has blank lines: they become a lone eos
        elif i % 7 == 1:
            lines.append(f" = {rng.choice(WORDS).title()} = ")
        else:
            lines.append(" " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 25)))
                         + " . Café ü")
    return lines


@pytest.fixture
def text_dir(tmp_path):
    """train/valid/test text files of a tiny WikiText-like corpus (with non-ASCII bytes)."""
    d = tmp_path / "text"
    d.mkdir()
    for i, split in enumerate(("train", "valid", "test")):
        lines = make_corpus({"train": 300, "valid": 60, "test": 50}[split], seed=i)
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d
