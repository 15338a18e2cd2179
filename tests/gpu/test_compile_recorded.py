"""compile_recorded's shared-memory check: triton.compile accepts a kernel that needs more shared
memory than an sm_90 block has (the driver refuses it only when a GPU loads it), so compile_one
compares the compiled kernel's `metadata.shared` with the limit itself (a real compile of fla's
RetNet output kernel at K = V = 1024 in fp32, Figure 2's widest paper model: 393,216 bytes)."""
import compile_recorded as cr


def test_autotuned_tells_fla_autotuned_kernels_from_our_fixed_ones():
    assert cr.autotuned(cr._find("fla.ops.common.chunk_o:chunk_fwd_kernel_o"))
    assert not cr.autotuned(cr._find("kernels.chunk_fwd:_fwd_states_kernel"))


def test_shared_verdict_fails_a_fixed_config_over_the_sm90_limit():
    r = cr.shared_verdict(cr.SHARED_MAX[90] + 1, 90, is_autotuned=False)
    assert r["ok"] is False and r["error"].startswith("OutOfResources: shared memory")


def test_shared_verdict_notes_an_autotuned_first_config_over_the_limit():
    assert "ok" not in (r := cr.shared_verdict(393216, 90, is_autotuned=True))
    assert "autotuner skips it" in r["note"]


def test_shared_verdict_is_silent_within_the_limit_and_for_unknown_archs():
    assert cr.shared_verdict(cr.SHARED_MAX[90], 90, is_autotuned=False) == {}
    assert cr.shared_verdict(10 ** 6, 75, is_autotuned=False) == {}
