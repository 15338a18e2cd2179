"""One-line, actionable errors for missing data or tokenizers."""


class LMDataError(RuntimeError):
    """Data or tokenizer cannot be loaded. str() is one line: what is missing and how to fix it."""

    def __init__(self, msg: str):
        super().__init__(" ".join(str(msg).split()))


def short_reason(exc: BaseException, limit: int = 120) -> str:
    """'ExcType: first sentence' of an exception, cut to `limit` characters."""
    text = " ".join(str(exc).split())
    first = text.split(". ")[0]
    if len(first) > limit:
        first = first[: limit - 1] + "…"
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
