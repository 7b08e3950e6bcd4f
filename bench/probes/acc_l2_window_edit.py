"""Probe only, not the product path: a generated OpenACC C file of a split-K decode whose
gang scratch (the score partials `moac_pp`, and the scores `moac_p` with MODE p) is given an
L2 access-policy window (persisting lines) through the CUDA driver, so that its round trip
stays in the L2 instead of going to DRAM.  The outputs are right: only the caching changes.

    python3 bench/probes/acc_l2_window_edit.py IN.c OUT.c MODE      # MODE: pp | p | none

The kernels are launched on OpenACC queue 1 (`async(1)`), whose CUDA stream is replaced
(acc_set_cuda_stream) by a stream carrying the window, and the device entry waits for the
queue before it returns (so it stays synchronous, like the generated entry).  The L2 set-aside
for persisting lines is the device's maximum (cuCtxSetLimit); where the window is larger,
hitRatio = set-aside ÷ window.  MODE none keeps the queue and stream but sets no window: the
cost of the queue alone.  The driver is opened with dlopen: build with the CUDA headers on the
include path (-I…/cuda/include), no CUDA library at link time."""
import re
import sys

PROBE = r'''
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <cuda.h>
/* probe: an L2 access-policy window over the gang scratch, on the stream of OpenACC queue 1 */
static int moac_probe_window(void *base, size_t bytes, int on)
{
    static void *lib;
    static CUstream stream;
    static size_t carve, wmax;
    static CUresult (*set_attr)(CUstream, CUstreamAttrID, const CUstreamAttrValue *);
    static CUresult (*push)(CUcontext);
    static CUresult (*pop)(CUcontext *);
    CUcontext ctx = (CUcontext)acc_get_current_cuda_context();
    if (!lib) {
        lib = dlopen("libcuda.so.1", RTLD_NOW);
        if (!lib)
            return 3;
        CUresult (*set_limit)(CUlimit, size_t) = dlsym(lib, "cuCtxSetLimit");
        CUresult (*get_attr)(int *, CUdevice_attribute, CUdevice) = dlsym(lib, "cuDeviceGetAttribute");
        CUresult (*get_dev)(CUdevice *) = dlsym(lib, "cuCtxGetDevice");
        CUresult (*mk)(CUstream *, unsigned) = dlsym(lib, "cuStreamCreate");
        set_attr = dlsym(lib, "cuStreamSetAttribute");
        push = dlsym(lib, "cuCtxPushCurrent_v2");
        pop = dlsym(lib, "cuCtxPopCurrent_v2");
        if (!set_limit || !get_attr || !get_dev || !mk || !set_attr || !push || !pop)
            return 3;
        CUdevice dev;
        int mp = 0, mw = 0;
        push(ctx);
        get_dev(&dev);
        get_attr(&mp, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, dev);
        get_attr(&mw, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, dev);
        CUresult r1 = on ? set_limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, (size_t)mp) : CUDA_SUCCESS;
        CUresult r2 = mk(&stream, CU_STREAM_NON_BLOCKING);
        pop(&ctx);
        carve = (size_t)mp;
        wmax = (size_t)mw;
        fprintf(stderr, "probe window: persisting set-aside max %d B (limit rc %d), window max %d B, stream rc %d\n",
                mp, (int)r1, mw, (int)r2);
        if (r2 != CUDA_SUCCESS || !acc_set_cuda_stream(1, stream))
            return 3;
    }
    if (on) {
        CUstreamAttrValue v;
        memset(&v, 0, sizeof v);
        size_t nb = bytes < wmax ? bytes : wmax;
        v.accessPolicyWindow.base_ptr = base;
        v.accessPolicyWindow.num_bytes = nb;
        v.accessPolicyWindow.hitRatio = nb <= carve ? 1.0f : (float)carve / (float)nb;
        v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
        v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
        push(ctx);
        CUresult r = set_attr(stream, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v);
        pop(&ctx);
        if (r != CUDA_SUCCESS)
            return 3;
    }
    return 0;
}
'''


def main() -> int:
    src, dst, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    assert mode in ("pp", "p", "none"), mode
    text = open(src).read()
    text = text.replace("#include <openacc.h>\n", "#include <openacc.h>\n" + PROBE, 1)
    first = "moac_pp" if mode in ("pp", "none") else "moac_p"
    call = (f"    {{ int prc = moac_probe_window({first}, (size_t)((char *)ws + ws_off - (char *)({first})), "
            f"{0 if mode == 'none' else 1}); if (prc) return prc; }}\n")
    n = text.count("    (void)ws_off;\n")
    assert n == 1, n
    text = text.replace("    (void)ws_off;\n", "    (void)ws_off;\n" + call)
    text, k = re.subn(r"(#pragma acc parallel loop gang[^\n]*)", r"\1 async(1)", text)
    assert k >= 2, k
    # the device entry waits for its queue before it frees its own scratch and returns
    dev = text.index("_device(")
    end = text.index("\n    return 0;\n}\n", dev)
    own = text.rindex("    if (own) {\n", dev, end)
    text = text[:own] + "    acc_wait(1);\n" + text[own:]
    open(dst, "w").write(text)
    print(f"{dst}: {k} kernels on queue 1, window mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
