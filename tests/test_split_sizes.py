"""The sizes the split-K plan derives before the run-time chunk choice
(moac.schedule.plans.split_sizes): the fewest tokens a chunk holds, from the bytes of its
K/V rows against its partial state, and the outputs a combine gang folds, from a frame
count fixed at compile time."""
from __future__ import annotations

from pathlib import Path

import sympy as sp

import moac
from moac.schedule.choices import MIN_CHUNK, chunk_size
from moac.schedule.plans.split_sizes import COMBINE_GANGS, SPLIT_RATIO, combine_regs

from test_back_common import check_kernel, example

ROOT = Path(__file__).resolve().parent.parent


def _with_kv(name: str, kv: str, tmp_path: Path) -> Path:
    text = (ROOT / "examples" / f"{name}.moa").read_text(encoding="utf-8")
    path = tmp_path / f"{name}_{kv}.moa"
    path.write_text(text.replace("input K : f32", f"input K : {kv}").replace("input V : f32", f"input V : {kv}"),
                    encoding="utf-8")
    return path


def _chunk_args(onf) -> tuple:
    (choice,) = onf.choices
    assert choice.rule == "moac_chunk"
    return choice.args


def test_gqa_bf16_chunks_hold_at_least_128_tokens(tmp_path):
    """4 query heads a gang write 4 × (128 + 2) floats of state a chunk; a token's K and V
    rows are 512 bytes of bf16: 16 × 2080 / 512 = 65 tokens, so 128."""
    onf = moac.load(_with_kv("decode_gqa_batched", "bf16", tmp_path)).onf(
        target="openacc", sizes=dict(hq=32, hkv=8, dk=128, dv=128))
    assert _chunk_args(onf)[2] == 128
    assert ("at least 128 tokens (its K/V rows, 512 bytes a token, at least 16× the partial state of its 4 heads, "
            "2080 bytes)") in str(onf)
    # the run-time choice: B = 1, n = 32768 gave chunks of 32 before the floor (1024 chunks a frame)
    assert chunk_size(32768, 8, 128) == 128 and chunk_size(32768, 8, MIN_CHUNK) == 16
    # where the floor would leave fewer than 16384 ÷ 8 gangs it yields: one sequence of 4096
    # tokens keeps 2048 gangs of 16 tokens (256 gangs of 128 ran 1.9x slower on the H200)
    assert chunk_size(4096, 8, 128) == 16 and chunk_size(4096, 32, 128) == 64
    assert chunk_size(4096, 8, 128, gangs=4096) == 64                     # cuda: 512 gangs at least
    # f32 rows weigh twice as much: 64 tokens
    onf32 = moac.load(ROOT / "examples/decode_gqa_batched.moa").onf(target="openacc",
                                                                    sizes=dict(hq=32, hkv=8, dk=128, dv=128))
    assert _chunk_args(onf32)[2] == 64
    assert 64 * 1024 >= SPLIT_RATIO * 2080 > 32 * 1024


def test_the_floor_needs_fixed_sizes():
    """With dv left to run time the state has no fixed size: the floor is MIN_CHUNK, and
    the ONF says why."""
    onf = example("decode").onf(target="openacc", sizes={"dk": 128})
    assert _chunk_args(onf)[2] == MIN_CHUNK
    assert "the partial state's size is not fixed at compile time" in str(onf)


def test_one_frame_combines_with_one_output_a_gang():
    """Single-head decode has one frame: 8 outputs a gang would leave the combine 16 gangs
    for dv = 128, so it folds 1 output a gang in 128 gangs (and says so); with frames left
    to run time (a batch B) the combine keeps 8."""
    onf = example("decode").onf(target="cuda", sizes={"dk": 128, "dv": 128})
    text = str(onf)
    assert "gang   db < 128" in text
    assert "combine: 1 output of d per gang, not 8, so that 1 frame gives the combine at least 128 gangs" in text
    assert combine_regs(sp.Integer(128), sp.Integer(1)) == 1
    assert combine_regs(sp.Integer(128), sp.Integer(8)) == 8          # 8 frames × 16 gangs = 128
    assert combine_regs(sp.Integer(128), sp.Integer(4)) == 4          # 4 frames × 32 gangs
    assert combine_regs(sp.Integer(128), sp.Symbol("B")) == 8
    assert combine_regs(sp.Integer(3), sp.Integer(1)) == 1
    assert all(f * -(-128 // combine_regs(128, f)) >= COMBINE_GANGS or combine_regs(128, f) == 1
               for f in range(1, 40))
    mha = example("decode_mha").onf(target="cuda", sizes={"dk": 128, "dv": 128})
    assert "db < 16" in str(mha) and "output of d per gang" not in str(mha)


def test_one_output_a_gang_is_still_the_fold():
    """The combine of 1 output a gang, over hundreds of partials (n = 5000 in chunks of 16),
    against the interpreter."""
    prog = example("decode")
    kern = prog.compile(target="c", sizes={"dk": 8, "dv": 8})
    assert "db < 8" in str(kern.onf) and "1 output of d per gang" in str(kern.onf)
    check_kernel(prog, kern, {"dk": 8, "dv": 8, "n": 5000}, seed=3)
