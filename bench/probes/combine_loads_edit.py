"""Probe only, not the product path: rewrite a generated .cu so that the combine kernel reads
the 8 o_part values of a lane as 2 float4 loads (mode f4) or 4 8-byte loads (mode u64).

    python3 bench/probes/combine_loads_edit.py IN.cu OUT.cu f4|u64   # then nvcc as moac builds it"""
import re, sys
src, dst, mode = sys.argv[1:4]
lines = open(src).read().split("\n")
out, i = [], 0
pat = re.compile(r"^(\s*)o0 = o0 \+ e \* moac_o_part\[(.*) \+ 8 \* db\];$")
n = 0
while i < len(lines):
    m = pat.match(lines[i])
    if m and lines[i + 7].lstrip().startswith("o7 = o7"):
        ind, base = m.group(1), m.group(2)
        addr = f"&moac_o_part[{base} + 8 * db]"
        if mode == "f4":
            out += [f"{ind}const float4 moac_pa = __ldg(reinterpret_cast<const float4 *>({addr}));",
                    f"{ind}const float4 moac_pb = __ldg(reinterpret_cast<const float4 *>({addr}) + 1);",
                    f"{ind}o0 += e * moac_pa.x; o1 += e * moac_pa.y; o2 += e * moac_pa.z; o3 += e * moac_pa.w;",
                    f"{ind}o4 += e * moac_pb.x; o5 += e * moac_pb.y; o6 += e * moac_pb.z; o7 += e * moac_pb.w;"]
        else:
            out += [f"{ind}const float2 *moac_pp = reinterpret_cast<const float2 *>({addr});",
                    f"{ind}const float2 moac_pa = __ldg(moac_pp), moac_pb = __ldg(moac_pp + 1), moac_pc = __ldg(moac_pp + 2), moac_pd = __ldg(moac_pp + 3);",
                    f"{ind}o0 += e * moac_pa.x; o1 += e * moac_pa.y; o2 += e * moac_pb.x; o3 += e * moac_pb.y;",
                    f"{ind}o4 += e * moac_pc.x; o5 += e * moac_pc.y; o6 += e * moac_pd.x; o7 += e * moac_pd.y;"]
        i += 8; n += 1
        continue
    out.append(lines[i]); i += 1
assert n == 2, n
open(dst, "w").write("\n".join(out))
