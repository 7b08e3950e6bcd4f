"""Tensor-core tiles for the split-K partials (moac.schedule.plans.tiles, moac.emit.tiles):
where the plan derives one and why it declines, that every target sees the same Schedule
and only cuda prints tile instructions, the printed fragment code, and an nvcc build.
Numerics need a GPU: bench/gpu_examples.py's bf16 variants (TILED) and bench/gpu_run.py
check the tiles there against the interpreter and float64."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import sympy as sp

import moac
from moac.emit import cir, tiles
from moac.jit.build import compile_flags
from moac.schedule.ir import TensorTile

ROOT = Path(__file__).resolve().parent.parent
GQA = dict(hq=32, hkv=8, dk=128, dv=128)


def bf16(example: str, tmp_path: Path, kv: str = "bf16") -> Path:
    text = (ROOT / "examples" / f"{example}.moa").read_text(encoding="utf-8")
    path = tmp_path / f"{example}_{kv}.moa"
    for name in ("K", "V", "Kp", "Vp"):
        text = text.replace(f"input {name} : f32", f"input {name} : {kv}")
    path.write_text(text, encoding="utf-8")
    return path


def tiles_of(onf) -> list:
    out = []

    def walk(body):
        for st in body:
            if isinstance(st, TensorTile):
                out.append(st)
            for f in ("body", "then", "other"):
                if hasattr(st, f):
                    walk(getattr(st, f))
    for k in onf.schedule.kernels:
        walk(k.body)
    return out


def test_bf16_gqa_gets_one_tile_of_its_group_with_contiguous_rows(tmp_path):
    onf = moac.load(bf16("decode_gqa_batched", tmp_path)).onf(target="cuda", sizes=GQA)
    (t,) = tiles_of(onf)
    assert (t.rows, t.dk, t.dv, t.storage, t.weight) == (4, 128, 128, "bf16", None)
    # K[i, a, tok, 0] and V[i, a, tok, 0] of the gang's KV head, Q[i, 4a + row, 0]
    i, a = sp.Symbol("i", integer=True, nonnegative=True), [s for s in t.q_at.free_symbols if s.name == "a"][0]
    n = sp.Symbol("n", integer=True, nonnegative=True)
    assert sp.expand(t.k_at - ((i * 8 + a) * n + t.tok) * 128) == 0 == sp.expand(t.v_at - t.k_at)
    assert sp.expand(t.q_at - ((i * 32 + 4 * a + t.row) * 128)) == 0
    # the score is the program's ÷ √dk of the dot product
    assert "moac_sv" in repr(t.score) and "sqrt" in repr(t.score)
    text = str(onf)
    assert "tile   c < cn   tensor-core tile m16n8k16 bf16 → f32" in text
    assert "note: tensor-core tile m16n8k16 bf16 → f32 derived for the chunk" in text


def test_the_onf_is_the_same_for_openacc_and_cuda_but_for_the_target(tmp_path):
    prog = moac.load(bf16("decode_gqa_batched", tmp_path))
    acc, cu = (str(prog.onf(target=t, sizes=GQA)).splitlines() for t in ("openacc", "cuda"))
    diff = [(x, y) for x, y in zip(acc, cu) if x != y]
    assert len(acc) == len(cu) and len(diff) == 1 and "target openacc" in diff[0][0] and "target cuda" in diff[0][1]


def test_only_cuda_prints_tile_instructions_the_others_the_lane_passes(tmp_path):
    prog = moac.load(bf16("decode_gqa_batched", tmp_path))
    cu = prog.c_source(target="cuda", sizes=GQA)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in cu
    # three shared stages, the loop unrolled three times; per kernel (both index widths) the first two
    # steps' copies and one in each unrolled step, a stage read in each unrolled step
    assert cu.count("moac_tile_copy<") == 2 * (2 + 3) and cu.count("moac_tile_read(moac_ta") == 2 * 3
    assert "if ((uintptr_t)K_ % 16 != 0)" in cu and "if ((uintptr_t)Q_ % 16 != 0)" in cu
    for target in ("openacc", "openmp", "c"):
        src = prog.c_source(target=target, sizes=GQA)
        assert "mma" not in src and "moac_tile" not in src and "% 16" not in src


@pytest.mark.parametrize("example, sizes, kv, why", [
    ("decode_gqa_batched", GQA, "f32", "K and V are stored as f32 and f32: the tile reads one of bf16, f16, f8e4m3"),
    ("decode_gqa_batched", GQA, "i8", "K and V are stored as i8 and i8"),
    ("decode_gqa_batched", dict(hq=32, hkv=8), "bf16", "the head dimension dk is not a fixed multiple of 32"),
    ("decode_gqa_batched", dict(hq=32, hkv=8, dk=96, dv=96), "bf16",
     "the weighted sum's output axis is not one fixed multiple of 64"),
])
def test_the_plan_says_why_it_declines_a_tile(tmp_path, example, sizes, kv, why):
    onf = moac.load(bf16(example, tmp_path, kv)).onf(target="cuda", sizes=sizes)
    assert not tiles_of(onf)
    notes = [n for n in onf.notes if n.startswith("no tensor-core tile: ")]
    assert len(notes) == 1 and why in notes[0], notes


def test_k_and_v_of_different_storage_get_no_tile(tmp_path):
    text = (ROOT / "examples" / "decode_gqa_batched.moa").read_text(encoding="utf-8")
    path = tmp_path / "mixed.moa"
    path.write_text(text.replace("input K : f32", "input K : bf16").replace("input V : f32", "input V : f16"),
                    encoding="utf-8")
    onf = moac.load(path).onf(target="cuda", sizes=GQA)
    assert not tiles_of(onf) and any("K and V are stored as bf16 and f16" in n for n in onf.notes)


@pytest.mark.parametrize("example, sizes, kv, shape, weight", [
    ("decode_gqa_batched", GQA, "f16", "m16n8k16 f16 → f32", False),
    ("decode_paged", dict(hq=32, hkv=8, d=128), "bf16", "m16n8k16 bf16 → f32", False),
    ("decode_ragged", dict(hkv=8, g=4, dk=128, dv=128), "bf16", "m16n8k16 bf16 → f32", False),
    ("decode_gqa_fp8", GQA, "f8e4m3", "m16n8k16 f16 → f32", True),
])
def test_f16_fp8_paged_and_ragged_caches_get_tiles(tmp_path, example, sizes, kv, shape, weight):
    src = bf16(example, tmp_path, kv) if kv != "f8e4m3" else ROOT / "examples" / f"{example}.moa"
    (t,) = tiles_of(moac.load(src).onf(target="cuda", sizes=sizes))
    assert t.shape == shape and (t.weight is not None) == weight
    if example == "decode_paged":        # the rows are found through the page table
        assert "table" in repr(t.k_at) and "table" in repr(t.v_at)
    if weight:                           # V_real = V × vs: vs[tok] scales p, the scores carry ks
        assert "vs" in repr(t.weight) and "ks" in repr(t.score)


def test_one_head_per_gang_gets_a_tile_of_one_row(tmp_path):
    """MHA: no KV group, one head a gang; its tile has one row (and its low half)."""
    onf = moac.load(bf16("decode_mha", tmp_path)).onf(target="cuda", sizes=dict(dk=128, dv=128))
    (t,) = tiles_of(onf)
    assert t.rows == 1 and "moac_row" not in repr(t.q_at) and "rows = the head and its low half" in t.meaning()
    src = moac.load(bf16("decode_mha", tmp_path)).c_source(target="cuda", sizes=dict(dk=128, dv=128))
    assert "const bool moac_live = moac_tr < 1;" in src and "the head and its low half as rows" in src


def test_the_counts_are_those_of_the_lane_passes(tmp_path):
    """The traffic model reads the tile's body: the same bytes as the f32 program's at half
    the K/V element size, the minimum plus the split overhead."""
    b16 = moac.load(bf16("decode_gqa_batched", tmp_path)).onf(target="cuda", sizes=GQA)
    f32 = moac.load(ROOT / "examples" / "decode_gqa_batched.moa").onf(target="cuda", sizes=GQA)
    B, n = (sp.Symbol(x, integer=True, nonnegative=True) for x in ("B", "n"))
    kv = 2 * 8 * 128 * B * n                     # K and V elements
    assert sp.simplify(f32.traffic - b16.traffic - 2 * kv) == 0
    assert sp.simplify(b16.minimum - (2 * kv + 2 * 4 * 32 * 128 * B)) == 0


def test_the_printed_tile_binds_row_token_and_score():
    t = cir.Tile("m16n8k16 f16 → f32", 4, 64, 64, "Q_", "K_", "V_", ("moac_m", "moac_z", "moac_o"),
                 cir.Bin("*", cir.Var("moac_row"), cir.Int(64)), cir.Bin("*", cir.Var("moac_tok"), cir.Int(64)),
                 cir.Bin("*", cir.Var("moac_tok"), cir.Int(64)), cir.Var("t0"), cir.Var("cn"),
                 cir.Bin("*", cir.Var("moac_sv"), cir.Num(0.125)), "moac_row", "l_",
                 cir.Var("moac_row"), cir.Var("moac_row"), cir.Bin("*", cir.Var("moac_row"), cir.Int(64)),
                 "f8e4m3", cir.Load("vs_", cir.Var("l_")))
    text = tiles.render(t, "int32_t")
    lines = [ln.strip() for ln in text.splitlines()]
    assert "const int32_t moac_row = moac_live ? moac_tr : 0;" in lines
    assert "moac_tile_q<64, 2>(moac_qa, Q_ + (moac_row * 64), moac_live, moac_tc);" in lines
    # three stages (two steps on their way), the loop unrolled three times
    S = tiles.stages(t)
    assert S == 3 and "moac_kv_tile<64, 64, 2> moac_ta;" in lines
    # the rows of a step's copy: the chunk's token t (clamped to its last) through the program's offsets
    assert "[&](int moac_t) { const int32_t moac_tok = moac_t0 + min((int32_t)(0 + moac_t), moac_tn - 1); " \
           "return K_ + (moac_tok * 64); }," in lines
    assert "[&](int moac_t) { const int32_t moac_tok = moac_t0 + min((int32_t)(moac_j + 16 + 32 + moac_t), moac_tn - 1); " \
           "return V_ + (moac_tok * 64); }, moac_lane);" in lines
    assert lines.count("moac_x[3] = moac_u < moac_tn ? moac_sv * 0.125f : -INFINITY;") == S
    # the weight's read of each score travels with the step's copies, in the registers of its stage
    assert "decltype(+vs_[0]) " + ", ".join(f"moac_r{k}_r0[4]" for k in range(S)) + ";" in lines
    for k in range(S):
        assert lines.count(f"moac_w[2] = moac_r{k}_r0[2];") == 1
        assert lines.count(f"moac_r{k}_r0[2] = vs_[l_];") == (2 if k < S - 1 else 1)
    assert "vs_[l_]" not in "".join(ln for ln in lines if ln.startswith("moac_w["))
    # the token of each score: 4 in each step and in each of its copies' reads (S − 1 before the loop, S in it)
    assert lines.count("const int32_t l_ = moac_t0 + (moac_u < moac_tn ? moac_u : moac_tn - 1);") == 4 * (S + S - 1 + S)
    assert ("moac_tile_finish<64>(moac_o, moac_tm, moac_tz, moac_live, moac_tc, moac_m + (moac_row), "
            "moac_z + (moac_row), moac_o + (moac_row * 64));") in lines


def _tile(dk: int, dv: int, storage: str, monkeypatch) -> str:
    monkeypatch.delenv("MOAC_CUDA_TILE_STAGES", raising=False)
    t = cir.Tile("m16n8k16 bf16 → f32", 4, dk, dv, "Q_", "K_", "V_", ("moac_m", "moac_z", "moac_o"),
                 cir.Bin("*", cir.Var("moac_row"), cir.Int(dk)), cir.Bin("*", cir.Var("moac_tok"), cir.Int(dk)),
                 cir.Bin("*", cir.Var("moac_tok"), cir.Int(dv)), cir.Var("t0"), cir.Var("cn"),
                 cir.Var("moac_sv"), "moac_row", "l_", cir.Var("moac_row"), cir.Var("moac_row"),
                 cir.Bin("*", cir.Var("moac_row"), cir.Int(dv)), storage)
    return tiles.render(t, "int32_t")


@pytest.mark.parametrize("dk, dv, storage", [(128, 128, "bf16"), (128, 128, "f16"), (128, 64, "f16"),
                                            (64, 64, "bf16"), (128, 128, "f8e4m3"), (64, 64, "f8e5m2")])
def test_a_warp_keeps_two_steps_on_their_way_in_shared_stages(dk, dv, storage, monkeypatch):
    """A step's K and V rows take 16·(dk + dv) elements; a warp keeps the step it computes and
    STEPS_AHEAD = 2 copied ahead (cp.async), 3 stages (the gang count follows the step's
    bytes instead: Target.gang_target)."""
    t = cir.Tile("", 4, dk, dv, "Q_", "K_", "V_", ("m", "z", "o"), 0, 0, 0, 0, 0, 0, "r", "l", 0, 0, 0, storage)
    assert tiles.step_bytes(t) == 16 * (dk + dv) * (2 if storage in ("bf16", "f16") else 1)
    S = 3
    assert tiles.STEPS_AHEAD == 2 and tiles.stages(t) == S
    lines = [ln.strip() for ln in _tile(dk, dv, storage, monkeypatch).splitlines()]
    st = tiles.ST[storage]
    assert f"__shared__ __align__(16) unsigned char moac_stage[{S}][moac_stage_geom<{dk}, {dv}, {st}>::BYTES];" \
           f"   /* this warp's {S} stages */" in lines
    assert lines.count("moac_cp_commit();") == (S - 1) + S and lines.count(f"moac_cp_wait<{S - 1}>();") == S
    for k in range(S):      # the loop unrolled S times: step k of the S reads stage k, copies into stage k − 1
        assert lines.count(f"moac_tile_read(moac_ta, moac_stage[{k}], moac_tr, moac_tc);") == 1
        assert lines.count(f"moac_tile_copy<{dk}, {dv}, {st}>(moac_stage[{k}],") == (2 if k < S - 1 else 1)
    # no token reads, no registers for them
    assert not any(ln.startswith("decltype(") for ln in lines)


def test_experiments_may_set_the_stages(monkeypatch):
    monkeypatch.setenv("MOAC_CUDA_TILE_STAGES", "3")
    t = cir.Tile("", 4, 64, 64, "Q_", "K_", "V_", ("m", "z", "o"), 0, 0, 0, 0, 0, 0, "r", "l", 0, 0, 0, "f8e4m3")
    assert tiles.stages(t) == 3


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_the_tiled_cuda_compiles_with_nvcc_without_spilling(tmp_path):
    src = moac.load(bf16("decode_gqa_batched", tmp_path)).c_source(target="cuda", sizes=GQA)
    cu = tmp_path / "gqa.cu"
    cu.write_text(src, encoding="utf-8")
    flags = [f for f in compile_flags("cuda", werror=True) if f not in ("-shared", "-Xcompiler", "-fPIC")]
    r = subprocess.run([shutil.which("nvcc")] + flags + ["-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "gqa.cubin"),
                                                       str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert " 0 bytes spill stores" in r.stderr and "spill stores" in r.stderr
    assert all(" 0 bytes spill" in ln for ln in r.stderr.splitlines() if "spill" in ln)


def test_the_gang_target_of_tile_kernels_is_target_data(tmp_path, monkeypatch):
    """cuda's chunk choice aims for Target.tile_gangs where the kernels have tiles whose chunks
    all hold the same tokens, fewer where tile_wave_bytes of a gang's steps at a time ask for
    fewer, longer streams (32 KB, four warps' 8 KB steps: 128), twice tile_gangs warps and at
    least tile_gangs gangs where the chunks are uneven, Target.gangs elsewhere; tile chunks may hold up to 65536 tokens."""
    import dataclasses
    from moac.targets import get_target
    cu = get_target("cuda")
    # about one wave of the tile kernels' one-warp blocks (8 a multiprocessor, 132 of them on an H200)
    assert cu.tile_gangs == 1024 and cu.gang_target(True) == 1024 and cu.gang_target(False) == cu.gangs == 4096
    assert cu.tile_wave_bytes == 4 << 20 and cu.gang_target(True, True, 8192) == 512      # bf16 at d = 128
    assert cu.gang_target(True, True, 4096) == 1024 and cu.gang_target(True, True, 2048) == 1024   # not above one wave
    assert cu.gang_target(True, even=False, step_bytes=8192) == 2048                      # uneven chunks: two waves
    assert cu.gang_target(True, even=False, step_bytes=16384, warps=2) == 1024           # ... of warps
    assert cu.gang_target(True, even=False, step_bytes=32768, warps=4) == 1024           # ... and tile_gangs gangs
    assert dataclasses.replace(cu, tile_gangs=0).gang_target(True, True, 8192) == cu.gangs
    assert dataclasses.replace(get_target("openacc"), tile_gangs=1024).gang_target(True) == get_target("openacc").gangs
    assert cu.chunk_ceiling(True) == 65536 and cu.chunk_ceiling(False) == get_target("openacc").chunk_ceiling(True) == 1024
    tiled = moac.load(bf16("decode_gqa_batched", tmp_path))
    monkeypatch.delenv("MOAC_TILE_WARPS", raising=False)
    sched = tiled.onf(target="cuda", sizes=GQA).schedule
    assert sched.tile_step_bytes == 4 * 16 * 256 * 2 and sched.tile_warps == 4     # four warps' 8 KB steps
    src = tiled.c_source(target="cuda", sizes=GQA)
    assert "about 128 gangs in all" in src and "while (c < want && c < 65536) c *= 2;" in src
    fp8 = moac.load(ROOT / "examples" / "decode_gqa_fp8.moa").c_source(target="cuda", sizes=GQA)
    assert "about 256 gangs in all" in fp8                                            # four warps' 4 KB steps
    ragged = moac.load(bf16("decode_ragged", tmp_path)).c_source(target="cuda", sizes=dict(hkv=8, g=4, dk=128, dv=128))
    assert "about 1024 gangs in all" in ragged                                        # uneven: tile_gangs
    plain = moac.load(bf16("decode_mha", tmp_path)).c_source(target="cuda", sizes=dict(dk=128, dv=128))
    assert "about 128 gangs in all" in plain                                          # a tile of one row
    f32 = moac.load(ROOT / "examples" / "decode_mha.moa").c_source(target="cuda", sizes=dict(dk=128, dv=128))
    assert "about 4096 gangs in all" in f32 and "while (c < want && c < 1024) c *= 2;" in f32
    # a ragged batch's chunks hold any number of tokens: one wave would leave them unbalanced
    ragged = moac.load(bf16("decode_ragged", tmp_path))
    assert not ragged.onf(target="cuda", sizes=GQA).schedule.even_tiles
    assert tiled.onf(target="cuda", sizes=GQA).schedule.even_tiles
    assert "about 1024 gangs in all" in ragged.c_source(target="cuda", sizes=GQA)   # of 4 warps


@pytest.mark.parametrize("page, blocked", [(16, True), (64, True), (8, False), (None, False)])
def test_a_step_of_16_tokens_reads_one_page_base_where_16_divides_the_page(tmp_path, page, blocked):
    """Rows of token 16·τ + u at base(τ) + stride·u: contiguous rows always, rows through a
    page table where the page is a literal multiple of 16 (a step never leaves its page);
    pages of 8 or of a run-time size give each row's offset per token."""
    sizes = dict(hq=32, hkv=8, d=128, **({"page": page} if page else {}))
    (t,) = tiles_of(moac.load(bf16("decode_paged", tmp_path)).onf(target="cuda", sizes=sizes))
    assert (t.blocks is not None) == blocked
    if blocked:
        (kb, ks), (vb, vs) = t.blocks
        assert ks == vs == 8 * 128                                  # the next token of a page: hkv·d further
        assert "table" in repr(kb) and "moac_blk" in repr(kb) and "moac_tok" not in repr(kb)
    dense = tiles_of(moac.load(bf16("decode_gqa_batched", tmp_path)).onf(target="cuda", sizes=GQA))[0]
    assert dense.blocks[0][1] == dense.blocks[1][1] == 128           # contiguous rows of d = 128


def test_the_warps_of_a_gang_fill_two_gangs_a_multiprocessor(monkeypatch):
    """plans.tiles.team_warps: the most warps (a power of two, at most MAX_WARPS) whose STAGES
    stages fit in GANG_SHARED, 96 KiB: two gangs on a multiprocessor of 228 KiB."""
    from moac.schedule.plans import tiles as plan
    monkeypatch.delenv("MOAC_TILE_WARPS", raising=False)
    assert plan.STAGES == tiles.STEPS_AHEAD + 1 == 3 and plan.BLOCK_SHARED == 49152 and plan.GANG_SHARED == 98304
    assert plan.team_warps(16 * 256 * 2) == 4          # bf16, dk = dv = 128: 4 × 3 × 8 KB
    assert plan.team_warps(16 * 256) == 4              # f8e4m3 at 128, bf16 at 64: 4 × 3 × 4 KB
    assert plan.team_warps(16 * 128) == 4              # never more than MAX_WARPS
    assert plan.team_warps(16 * 512 * 2) == 2          # dk = dv = 256: 2 × 3 × 16 KB
    assert plan.team_warps(16 * 1024 * 2) == 1         # dk = dv = 512: one warp, even past 96 KiB
    monkeypatch.setenv("MOAC_TILE_WARPS", "1")
    assert plan.team_warps(16 * 256) == 1


def test_a_gang_of_two_warps_shares_its_steps_and_merges_its_state(tmp_path, monkeypatch):
    """Warp w of a gang takes the steps w, w + W, ... of the chunk from its own stages; at the
    end the warps' states meet in warp 0 (moac_tile_merge), which alone writes the partials and
    runs what follows the tile in the gang (the last gang's fold); a block has 32·W threads
    (two warps, as bf16 at d = 256 gets; printed here at d = 128)."""
    monkeypatch.setenv("MOAC_TILE_WARPS", "2")
    monkeypatch.delenv("MOAC_CUDA_TILE_STAGES", raising=False)
    src = moac.load(bf16("decode_gqa_batched", tmp_path)).c_source(target="cuda", sizes=GQA)
    lines = [ln.strip() for ln in src.splitlines()]
    assert "__global__ void __launch_bounds__(64) moac_decode_gqa_batched_bf16_k1_partials(" in src
    assert ("__shared__ __align__(16) unsigned char moac_stages[2][3][moac_stage_geom<128, 128, 0>::BYTES];"
            "   /* 3 stages for each of the gang's 2 warps */") in lines
    assert "const int64_t moac_jw = 16 * moac_warp;   /* this warp's first step: steps w, w + 2, ... */" in lines
    assert "for (int64_t moac_j = moac_jw; moac_j < moac_tn; moac_j += 96) {   /* 3 steps of 16 tokens, " \
           "the copies 2 steps ahead first */" in lines
    assert lines.count("if (moac_j + 32 >= moac_tn)") == 2 and lines.count("if (moac_jw + 32 < moac_tn)") == 2   # 64, 32-bit
    merge = ("moac_tile_merge<128, 2, 3 * moac_stage_geom<128, 128, 0>::BYTES>(&moac_stages[0][0][0], "
             "moac_o, moac_tm, moac_tz, moac_warp, moac_lane);")
    assert lines.count(merge) == 2                      # the 64- and the 32-bit index kernels
    i = lines.index(merge)
    # a frame of one gang: both warps merge 8 column blocks each and store them; other frames' partials from warp 0
    assert lines[i - 3].startswith("if (8 * B_ >= 32 && n_ / chunk + (n_ % chunk != 0) == 1)   "
                                   "/* a frame of one gang: its warps merge 8 column blocks each")
    assert lines[i - 2].startswith("moac_tile_merge_out<128, 2, 3 * moac_stage_geom<128, 128, 0>::BYTES>(&moac_stages[0][0][0], "
                                   "moac_o, moac_tm, moac_tz, moac_warp, moac_lane, moac_live, moac_tc, out_ + (")
    assert lines[i - 1] == "else {" and lines[i + 1] == "if (moac_warp == 0)" and lines[i + 2].startswith("moac_tile_finish<128>(")
    fold = lines.index("const unsigned moac_need = n_ / chunk + (n_ % chunk != 0);")
    assert lines[fold - 1] == "if (8 * B_ >= 32 && n_ / chunk + (n_ % chunk != 0) >= 1 && n_ / chunk + (n_ % chunk != 0) <= 32) {"
    assert "if (moac_warp == 0) {" in lines[i + 3:fold]
    assert ", 64, 0, moac_stream>>>(" in src


def test_a_tile_of_several_warps_must_be_reached_by_the_whole_block():
    from moac.emit.tiles import team_body as _team
    from moac.errors import RewriteError
    t = cir.Tile("", 4, 64, 64, "Q_", "K_", "V_", ("m", "z", "o"), 0, 0, 0, 0, 0, 0, "r", "l", 0, 0, 0, "bf16", warps=2)
    after = cir.Raw("after();")
    out = _team((cir.Raw("before();"), cir.If(cir.Var("x"), (t, after)), after))
    assert out[1].then[0] is t and out[1].then[1] == cir.If(cir.Bin("==", cir.Var("moac_warp"), cir.Int(0)), (after,))
    assert out[2] == cir.If(cir.Bin("==", cir.Var("moac_warp"), cir.Int(0)), (after,))
    with pytest.raises(RewriteError, match="condition of its lanes"):
        _team((cir.If(cir.Bin("<", cir.Var("moac_lane"), cir.Int(4)), (t,)),))
    with pytest.raises(RewriteError, match="loop of its gang"):
        _team((cir.For("i", cir.Int(4), (t,)),))


def test_stages_past_48_kib_are_dynamic_shared_memory(tmp_path, monkeypatch):
    """Four warps of 3 bf16 stages at d = 128 (the default) take 96 KiB, more than a block
    declares statically: the stages are the kernel's dynamic shared memory, which its launch
    asks for."""
    monkeypatch.delenv("MOAC_TILE_WARPS", raising=False)
    monkeypatch.delenv("MOAC_CUDA_TILE_STAGES", raising=False)
    src = moac.load(bf16("decode_gqa_batched", tmp_path)).c_source(target="cuda", sizes=GQA)
    assert "extern __shared__ __align__(16) unsigned char moac_dyn_smem[];" in src
    assert "auto &moac_stages = *reinterpret_cast<unsigned char (*)[4][3][moac_stage_geom<128, 128, 0>::BYTES]>" in src
    assert "cudaFuncSetAttribute(moac_decode_gqa_batched_bf16_k1_partials, cudaFuncAttributeMaxDynamicSharedMemorySize, " \
           "(int)(98304));" in src
    assert ", 128, 98304, moac_stream>>>(" in src and "__launch_bounds__(128) moac_decode_gqa_batched_bf16_k1_partials(" in src
    t = cir.Tile("", 4, 128, 128, "Q_", "K_", "V_", ("m", "z", "o"), 0, 0, 0, 0, 0, 0, "r", "l", 0, 0, 0, "bf16", warps=2)
    assert tiles.shared_bytes(t) == 2 * 3 * 8192 and not tiles.dynamic(t)


def test_a_frame_of_one_gang_stores_its_outputs_from_the_tile(tmp_path):
    """Where a frame has one partial and its fold is in the partials kernel, that fold is the
    identity (M = m, e^0 = 1, Z = z): the gang stores out = o ÷ z from the tile's registers
    (moac_tile_out) instead of its partials, and the fold does not run for it; frames of
    several gangs store partials, count and fold as before.  The Schedule says so (the tile's
    line and a note), the same for every target."""
    prog = moac.load(bf16("decode_gqa_batched", tmp_path))
    src = prog.c_source(target="cuda", sizes=GQA)
    lines = [ln.strip() for ln in src.splitlines()]
    # four warps a gang (the default): each merges 4 of the 16 column blocks of the four warps' states and stores them
    store = lines.index("moac_tile_merge_out<128, 4, 3 * moac_stage_geom<128, 128, 0>::BYTES>(&moac_stages[0][0][0], moac_o, "
                        "moac_tm, moac_tz, moac_warp, moac_lane, moac_live, moac_tc, out_ + (512 * a + 128 * moac_row + 4096 * i_));")
    assert lines[store - 1] == ("if (8 * B_ >= 32 && n_ / chunk + (n_ % chunk != 0) == 1)   /* a frame of one gang: its warps "
                                "merge 4 column blocks each and store out_ = o ÷ z, no partials, no fold */")
    assert lines[store + 1:store + 4] == ["else {", "moac_tile_merge<128, 4, 3 * moac_stage_geom<128, 128, 0>::BYTES>("
                                          "&moac_stages[0][0][0], moac_o, moac_tm, moac_tz, moac_warp, moac_lane);",
                                          "if (moac_warp == 0)"]
    assert lines[store + 4].startswith("moac_tile_finish<128>(") and lines[store + 5] == "}"
    fold = lines.index("const unsigned moac_need = n_ / chunk + (n_ % chunk != 0);", store)
    assert lines[fold + 1:fold + 4] == ["unsigned moac_last = 0;", "if (moac_need != 1) {",
                                        "__threadfence();   /* this gang's partials, visible before it is counted */"]
    assert "/* a frame of one gang: its tile stored the outputs */" in lines[fold:]
    assert src.count("static __device__ __forceinline__ void moac_tile_out(") == 1
    assert src.count("static __device__ __forceinline__ void moac_tile_merge_out(") == 1
    # the counters are zeroed only where a frame has two partials or more: one launch otherwise
    zero = "cudaMemsetAsync(moac_done, 0, sizeof(float) * (size_t)(8 * B_), moac_stream);"
    assert lines.count(zero) == 2
    assert lines[lines.index(zero) - 1] == ("if (8 * B_ >= 32 && n_ / chunk + (n_ % chunk != 0) <= 32 && "
                                            "n_ / chunk + (n_ % chunk != 0) > 1)")
    for target in ("cuda", "openacc"):
        assert "a frame of one gang stores out = o ÷ z from the tile, no fold" in str(prog.onf(target=target, sizes=GQA))
    # no fold in the kernel (too few frames for it): no direct store either
    few = moac.load(bf16("decode_gqa", tmp_path)).c_source(target="cuda", sizes=GQA)
    assert "moac_tile_out" not in few


def test_the_warps_of_a_one_gang_frame_share_out_its_columns_where_they_divide_a_block():
    """moac_tile_merge_out gives each of a gang's warps dv ÷ 8 ÷ warps column blocks inside a
    64-wide block of outputs; where they do not divide so, warp 0 merges and stores alone."""
    def tile(dv, warps):
        return cir.Tile("", 4, 128, dv, "Q_", "K_", "V_", ("m", "z", "o"), 0, 0, 0, 0, 0, 0, "r", "l", 0, 0, 0, "bf16",
                        warps=warps)
    assert [tiles._shared_out(tile(128, w)) for w in (2, 4, 8, 16)] == [True, True, True, True]
    assert [tiles._shared_out(tile(64, w)) for w in (2, 4, 8, 16)] == [True, True, True, False]
    assert not tiles._shared_out(tile(128, 3)) and not tiles._shared_out(tile(256, 2))     # 16 blocks a warp: two 64-wide blocks


def test_an_experiment_may_rotate_the_steps_of_each_block(tmp_path, monkeypatch):
    # MOAC_CUDA_TILE_ROTATE=1 (not measured yet, docs/benchmarks.md 2026-12-06): each block takes
    # its chunk's steps from a step of its own around to the one before; every token offset
    # the tile derives from a step (the copies' rows, the page block, the scores' tokens) goes
    # through the rotation, and nothing else changes
    src = bf16("decode_gqa_batched", tmp_path)
    plain = moac.load(src).c_source(target="cuda", sizes=GQA)
    monkeypatch.setenv("MOAC_CUDA_TILE_ROTATE", "1")
    rot = moac.load(src).c_source(target="cuda", sizes=GQA)
    assert "moac_rot" not in plain
    old, new = plain.splitlines(), rot.splitlines()
    added = [ln for ln in new if " moac_ns = " in ln or " moac_rot = " in ln]
    assert [ln.split("=")[0].strip() for ln in added] == [f"const int{w}_t moac_{v}" for w in (64, 32) for v in ("ns", "rot")]
    kept = [ln for ln in new if ln not in added]
    assert len(kept) == len(old)
    changed = [(a, b) for a, b in zip(old, kept) if a != b]
    assert changed and all("moac_rot" in b for _, b in changed)
    assert all(any(k in a for k in ("moac_blk =", "moac_kb +", "moac_vb +", "moac_u =")) for a, _ in changed)
    if shutil.which("nvcc"):
        cu = tmp_path / "rot.cu"
        cu.write_text(rot, encoding="utf-8")
        flags = [f for f in compile_flags("cuda", werror=True) if f not in ("-shared", "-Xcompiler", "-fPIC")]
        r = subprocess.run([shutil.which("nvcc")] + flags + ["-cubin", "-o", str(tmp_path / "rot.cubin"), str(cu)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
