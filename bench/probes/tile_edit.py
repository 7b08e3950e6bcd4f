"""Probe only, not the product path: rewrite a generated .cu with a tensor-core tile kernel.

    python3 bench/probes/tile_edit.py IN.cu OUT.cu MODE     # then nvcc as moac builds it

MODE: split  the 16-term sums of a K row's scores (moac_tile_scores) in two chains of
             alternate k-steps, added at the end, instead of one chain of dk/16 dependent
             mma instructions (more tensor-core work in flight per warp; other bits)."""
import sys

src, dst, mode = sys.argv[1:4]
text = open(src).read()
if mode == "split":
    old = """        s[b][0] = s[b][1] = s[b][2] = s[b][3] = 0.0f;
#pragma unroll
        for (int st = 0; st < DK / 16; ++st) {
            uint32_t b0, b1;
            moac_tile_kfrag<ST>(t.k[b][st / 2], st % 2, b0, b1);
            moac_mma<ST>(s[b], qa[st], b0, b1);
        }"""
    new = """        float u[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int st = 0; st < DK / 16; ++st) {
            uint32_t b0, b1;
            moac_tile_kfrag<ST>(t.k[b][st / 2], st % 2, b0, b1);
            moac_mma<ST>(u[st % 2], qa[st], b0, b1);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) s[b][i] = u[0][i] + u[1][i];"""
    assert text.count(old) == 1
    text = text.replace(old, new)
else:
    sys.exit(f"unknown mode {mode}")
open(dst, "w").write(text)
