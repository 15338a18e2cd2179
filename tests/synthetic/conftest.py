import pytest


@pytest.fixture(autouse=True, scope="session")
def _synthetic_cache_in_tmp(tmp_path_factory):
    """Generated data of these tests goes to a temporary cache, never the repo's cache/."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ZEROS_SYNTH_CACHE", str(tmp_path_factory.mktemp("synthetic_cache")))
    yield
    mp.undo()
