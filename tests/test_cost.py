"""moac cost: figures derived from the ONF for Llama-3-8B's decode attention."""
import sympy as sp

import moac
from moac import cost, hardware


def llama3_8b(**extra):
    prog = moac.load("examples/decode_gqa.moa")
    sizes = {"hq": 32, "hkv": 8, "dk": 128, "dv": 128, **extra}
    return prog, cost.analyse(prog, sizes, storage={"K": "bf16", "V": "bf16"})


def test_kv_bytes_per_token_is_what_the_config_implies():
    _, c = llama3_8b()
    assert c.kv_per_token == 2 * 8 * 128 * 2          # K and V, 8 KV heads, head dim 128, bf16
    assert c.kv_per_token * 32 == 128 * 1024          # 32 layers: 128 KiB per token


def test_intensity_is_the_group_ratio():
    _, c = llama3_8b()
    ai = float(c.flops_per_token / c.kv_per_token)
    assert 4.0 <= ai < 4.2                             # g = 4, plus the softmax's few flops per score


def test_the_numbers_follow_the_onf_not_a_table():
    prog = moac.load("examples/decode_gqa.moa")
    mqa = cost.analyse(prog, {"hq": 32, "hkv": 1, "dk": 128, "dv": 128}, storage={"K": "bf16", "V": "bf16"})
    mha32 = cost.analyse(prog, {"hq": 32, "hkv": 32, "dk": 128, "dv": 128})
    assert mqa.kv_per_token == 512
    assert mha32.kv_per_token == 2 * 32 * 128 * 4
    assert 32 <= float(mqa.flops_per_token / mqa.kv_per_token) < 33
    assert 0.5 <= float(mha32.flops_per_token / mha32.kv_per_token) < 0.52


def test_report_with_all_sizes_gives_a_roofline():
    prog, _ = llama3_8b()
    text = cost.report(prog, {"hq": 32, "hkv": 8, "dk": 128, "dv": 128, "n": 8192}, [hardware.HARDWARE["H200"]],
                       32, "bf16")
    assert "131,072 bytes (128.00 KiB) per token" in text
    assert "memory-bound" in text
    n = sp.Symbol("n", integer=True, nonnegative=True)
    assert "4096·(n + 8)" in text and n is not None


def test_cpu_is_measured():
    hw = hardware.get("cpu")
    assert hw.bandwidth > 1e8 and hw.fp32 > 1e8
