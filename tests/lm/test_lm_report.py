"""tasks/lm/report.py: Figure 4's title names the data the runs trained on."""
import pandas as pd

from tasks.lm.report import _local_data


def _frame(data, tok="byte"):
    return pd.DataFrame([{"row": "ZeroS", "datamodule": {"data": data, "tokenizer": {"name": tok}}}])


def test_local_data_names_a_local_text_folder():
    df = _frame({"source": "local", "path": "/data/wikitext-2"})
    assert _local_data(df) == "wikitext-2 (byte tokens)"


def test_local_data_is_empty_for_the_papers_corpus_and_old_frames():
    assert _local_data(_frame({"source": "hf", "path": None}, tok="gpt2")) == ""
    assert _local_data(pd.DataFrame([{"row": "ZeroS"}])) == ""
    assert _local_data(pd.DataFrame()) == ""
