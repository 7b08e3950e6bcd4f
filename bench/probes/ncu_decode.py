"""Probe: moac's bundle or PyTorch's SDPA in bf16 on one decode shape, with the calls to look
at between cudaProfilerStart and cudaProfilerStop (run under `ncu --profile-from-start off`).

    ncu --profile-from-start off ... python3 bench/probes/ncu_decode.py moac BUNDLE.json B hq hkv n d
    ncu --profile-from-start off ... python3 bench/probes/ncu_decode.py sdpa - B hq hkv n d"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_runtime  # noqa: F401,E402
from moac.gpu import load_bundle  # noqa: E402
from moac.gpu.run import random_inputs  # noqa: E402

what, man = sys.argv[1], sys.argv[2]
B, hq, hkv, n, d = map(int, sys.argv[3:8])
k = load_bundle(Path(man)) if what == "moac" else None   # an OpenACC bundle's libgomp before torch's
import torch  # noqa: E402
if what == "moac":
    sizes = {s: v for s, v in (("B", B), ("n", n), ("h", hq)) if s in k.manifest.size_params}
    inputs, outs = random_inputs(k, sizes, torch, 0)
    L = k.prepare(out=outs, **inputs, **sizes)
    call = L
else:
    q = torch.randn(B, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    K = torch.randn(B, hkv, n, d, device="cuda", dtype=torch.bfloat16)
    V = torch.randn(B, hkv, n, d, device="cuda", dtype=torch.bfloat16)
    call = lambda: torch.nn.functional.scaled_dot_product_attention(q, K, V, enable_gqa=hq != hkv)  # noqa: E731
for _ in range(3):
    call()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
call()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("ok")
