"""C unit -> CUDA C (stage 5b for the cuda target): the same frozen loops as the OpenACC
C, each level given its CUDA meaning instead of a pragma.

    gang loops (a collapsed chain)  ->  one block per iteration, a grid-stride loop over
                                        their flattened product
    a single-gang (serial) region   ->  a launch of one block
    vector loop                     ->  lane `moac_lane` takes iterations lane, lane+32, ...
    vector reduction                ->  lanes other than 0 start from the operator's
                                        identity, then a butterfly of warp shuffles leaves
                                        the total in every lane
    seq / register loops, scalars   ->  every lane runs them (the values are the same in
                                        all lanes, as OpenACC's gang-redundant code)

A block is one warp (the target's vector length, 32), so a warp shuffle is the whole
reduction and `__syncwarp()` after each vector loop orders the lanes' scratch stores
before the loads of the next one.  Nothing here changes the Schedule: the mapping, the
liftings and the coalescing proof are the ones the OpenACC C prints.  No sympy here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import ops
from ..errors import RewriteError
from . import cir, tiles
from .cuda_helpers import device_helpers, replaced

LANES = 32
LANE = cir.Var("moac_lane")
LANE_UNROLL = 4      # iterations of a lane loop unrolled (loads in flight per lane)
FOLD_UNROLL = 4      # steps of a last gang's sequential fold unrolled (8 measured the same on the H200)


@dataclass(frozen=True, slots=True)
class Region:
    """One device region of a kernel: a `__global__` function and its launch."""
    name: str
    params: tuple        # (ctype, name): pointers first, then scalars
    total: object        # cir: the number of gang iterations (1 for a serial region)
    body: tuple          # cir statements of the device code, lanes already mapped
    warps: int = 1       # warps per block: each its own gang iteration, or a tile's warps sharing one
    smem: str = ""       # C expression: bytes of dynamic shared memory per block ("" for none)
    shared: tuple = ()   # (C name, ctype) of the gang buffers it keeps in shared memory


def _walk(x, fn):
    """Visit every cir node below x (tuples and dataclasses)."""
    if isinstance(x, tuple):
        for y in x:
            _walk(y, fn)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        fn(x)
        for f in dataclasses.fields(x):
            _walk(getattr(x, f.name), fn)


def _uses(code) -> tuple[set, set, set, set, set]:
    """(variables read, arrays touched, names declared, arrays read in packed words, arrays
    stored to) in a piece of cir."""
    reads, arrays, decls, words, stored = set(), set(), set(), set(), set()

    def visit(n):
        match n:
            case cir.Var(name=v):
                reads.add(v)
            case cir.Load(array=a):
                arrays.add(a)
            case cir.Store(array=a):
                arrays.add(a)
                stored.add(a)
            case cir.Decl(name=v):
                decls.add(v)
            case cir.For(var=v):
                decls.add(v)
            case cir.Assign(name=v):
                reads.add(v)
            case cir.Tile(q=q, k=k, v=v, parts=parts, row=row, tok=tok, out=out):
                arrays.update((q, k, v) + parts + ((out,) if out else ()))
                stored.update(parts + ((out,) if out else ()))
                reads.add("moac_lane")
                decls.update((row, tok) + tiles.DECLARED)
            case cir.Call(fn="moac_word" | "moac_word4", args=(cir.Var(name=a), _)):
                arrays.add(a)
                words.add(a)
            case cir.Call(fn="moac_sword", args=(cir.Var(name=a), _)):    # words of an array the kernel writes
                arrays.add(a)
    _walk(code, visit)
    return reads, arrays, decls, words, stored


def _identity(op: str, ctype: str):
    """The operator's identity, the start of every lane but lane 0 in a vector reduction."""
    return cir.Num(float(ops.OPS[op].identity))


def warp_helper(op: str, ctype: str) -> tuple[str, str]:
    """(name, C text) of the butterfly reduction of one operator over a warp."""
    o = ops.OPS[op]
    tag = "f32" if ctype == "float" else "f64"
    name = f"moac_warp_{op}_{tag}"
    y = "__shfl_xor_sync(0xffffffffu, x, o)"
    if o.c_infix:
        comb = f"x {o.c_infix} {y}"
    else:
        comb = f"{o.c_fn}{'f' if ctype == 'float' else ''}(x, {y})"
    text = (f"static __device__ inline {ctype} {name}({ctype} x) {{ "
            f"for (int o = {LANES // 2}; o > 0; o >>= 1) x = {comb}; return x; }}")
    return name, text


class _Lanes:
    """Device code of one region: vector loops mapped to lanes, reductions to shuffles."""

    def __init__(self, ctype: str):
        self.ctype = ctype
        self.types: dict = {}         # device-declared name -> ctype
        self.warp: dict = {}          # helper name -> text
        self.count = 0                # fresh names (moac_up1, moac_tot2, ...)
        self.counters: list = []      # (counter array, C elements, C condition) of the LastGangs met
        self.zeroed: list = []        # (output array, C elements, C condition): zero-filled before the kernel
        self.fold = False             # inside a LastGang's fold: its sequential loops are unrolled

    def stmts(self, body) -> tuple:
        out = []
        for s in body:
            x = self.stmt(s)
            out += x if isinstance(x, list) else [x]
        return tuple(out)

    def stmt(self, s):
        match s:
            case cir.Decl(ctype=t, name=n):
                self.types[n] = t
                return s
            case cir.For(level="gang"):
                raise RewriteError("a gang loop inside a device region has no CUDA mapping")
            case cir.For(level="vector"):
                return self.vector(s)
            case cir.For():
                return dataclasses.replace(s, body=self.stmts(s.body),
                                           pragma=f"#pragma unroll {FOLD_UNROLL}" if self.fold and s.level == "seq" else None)
            case cir.If(then=t, other=o):
                return dataclasses.replace(s, then=self.stmts(t), other=self.stmts(o))
            case cir.Block(body=b):
                return dataclasses.replace(s, body=self.stmts(b), pragma=None, level=None)
            case cir.LastGang():
                return self.last_gang(s)
        return s

    def last_gang(self, s: cir.LastGang) -> cir.If:
        """Every lane fences its stores of the partials, lane 0 counts the gang on the frame's
        counter, and the gang that brings it to `count` (the frame's last) folds the frame,
        after a fence of its own (the threadfence-reduction pattern of the CUDA samples).
        A frame of one gang needs neither fence nor count: that gang folds what its own warp
        stored (`__syncwarp` orders the lanes' stores and loads), or nothing where its tile
        stored the outputs itself (LastGang.direct).  The counters are zeroed on
        the stream before the kernel where some frame has several gangs (`counted`), and the
        outputs of `zero` where `when` holds (a frame no gang folds: a token axis read from data
        that is empty)."""
        self.counters.append((s.counter, cir.expr(s.size, self.ctype),
                              cir.expr(s.when if s.counted is None else s.counted, self.ctype)))
        self.zeroed += [(a, cir.expr(n, self.ctype), cir.expr(s.when, self.ctype)) for a, n in s.zero]
        self.fold = True
        body = self.stmts(s.body)
        self.fold = False
        count = (cir.Raw("__threadfence();   /* this gang's partials, visible before it is counted */"),
                 cir.Raw("__syncwarp();"),
                 cir.Decl("const long long", "moac_slot", s.index),
                 cir.If(cir.Bin("==", LANE, cir.Int(0)),
                        (cir.Raw(f"moac_last = atomicAdd((unsigned *)&{s.counter}[moac_slot], 1u) == moac_need - 1u;"),)),
                 cir.Raw("moac_last = __shfl_sync(0xffffffffu, moac_last, 0);"),
                 cir.If(cir.Var("moac_last"), (cir.Raw("__threadfence();"),)))
        if s.direct:              # a frame of one gang stored its outputs from its tile: nothing to fold
            one = (cir.Decl("unsigned", "moac_last", cir.Int(0)),
                   cir.If(cir.Bin("!=", cir.Var("moac_need"), cir.Int(1)), count,
                          (cir.Raw("/* a frame of one gang: its tile stored the outputs */"),)))
        else:
            one = (cir.Decl("unsigned", "moac_last", cir.Bin("==", cir.Var("moac_need"), cir.Int(1))),
                   cir.If(cir.Var("moac_last"), (cir.Raw("__syncwarp();   /* a frame of one gang: no fence, no count */"),),
                          count))
        return cir.If(s.when, (
            cir.Decl("const unsigned", "moac_need", s.count), *one,
            cir.If(cir.Var("moac_last"), (cir.Block(body, comment=s.comment or None),))))

    def vector(self, s: cir.For) -> list:
        out: list = []
        names = [(op, n) for op, ns in s.reduce for n in ns]
        if names:
            out.append(cir.If(cir.Bin("!=", LANE, cir.Int(0)),
                              tuple(cir.Assign(n, _identity(op, self.types.get(n, self.ctype))) for op, n in names)))
        body = self.stmts(s.body)
        if s.start == cir.Int(0) and s.extent == cir.Int(LANES):      # exactly one iteration per lane
            out.append(cir.Block((cir.Decl(f"const {s.itype}", s.var, LANE),) + body, comment=s.comment))
        else:
            # unrolled so that several iterations' loads are in flight before the first is used
            # (an in-order warp otherwise waits one memory latency per iteration)
            out.append(dataclasses.replace(s, body=body, pragma=f"#pragma unroll {LANE_UNROLL}",
                                           start=cir.add(s.start, LANE), step=cir.Int(LANES)))
        groups: dict = {}
        for op, n in names:
            groups.setdefault((op, self.types.get(n, self.ctype)), []).append(n)
        for (op, ctype), ns in groups.items():
            if len(ns) == 1:
                hname, text = warp_helper(op, ctype)
                self.warp[hname] = text
                out.append(cir.Assign(ns[0], cir.Call(hname, (cir.Var(ns[0]),))))
            else:
                out.append(scatter_reduce(op, ctype, ns, self.fresh))
        out.append(cir.Raw("__syncwarp();"))
        return out

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"moac_{stem}{self.count}"


FULL = cir.Var("0xffffffffu")


def _combine(op: str, ctype: str, a, b):
    o = ops.OPS[op]
    if o.c_infix:
        return cir.Bin(o.c_infix, a, b)
    return cir.Call(o.c_fn + ("f" if ctype == "float" else ""), (a, b))


def scatter_reduce(op: str, ctype: str, names: list, fresh) -> cir.Block:
    """N accumulators reduced across the warp in about 2N shuffles instead of 5N: each
    butterfly step exchanges half of the values still held (lanes with the step's bit
    set keep the upper half), so after log2 N steps every lane holds one partial total
    and the remaining steps finish it; the N totals are then broadcast from the lanes
    that hold them.  Padded to a power of two with the operator's identity."""
    P = 1
    while P < len(names):
        P *= 2
    if P > LANES:
        raise RewriteError(f"{len(names)} accumulators in one vector reduction: more than the {LANES} lanes")
    body: list = []
    cur = list(names)
    for _ in range(P - len(names)):
        pad = fresh("pad")
        body.append(cir.Decl(ctype, pad, _identity(op, ctype)))
        cur.append(pad)
    halves = []                     # (offset, half) of each halving step
    o = LANES // 2
    while o >= 1:
        if len(cur) > 1:
            half = len(cur) // 2
            up = fresh("up")
            body.append(cir.Decl("const int", up, cir.Bin("!=", cir.Bin("&", LANE, cir.Int(o)), cir.Int(0))))
            for i in range(half):
                a, b = cir.Var(cur[i]), cir.Var(cur[i + half])
                keep, send = cir.Cond(cir.Var(up), b, a), cir.Cond(cir.Var(up), a, b)
                body.append(cir.Assign(cur[i], _combine(op, ctype, keep, cir.Call("__shfl_xor_sync", (FULL, send, cir.Int(o))))))
            halves.append((o, half))
            cur = cur[:half]
        else:
            x = cir.Var(cur[0])
            body.append(cir.Assign(cur[0], _combine(op, ctype, x, cir.Call("__shfl_xor_sync", (FULL, x, cir.Int(o))))))
        o //= 2
    total = fresh("tot")
    body.append(cir.Decl(ctype, total, cir.Var(cur[0])))
    for k, n in enumerate(names):
        src = sum(o for o, half in halves if (k // half) % 2)
        body.append(cir.Assign(n, cir.Call("__shfl_sync", (FULL, cir.Var(total), cir.Int(src)))))
    return cir.Block(tuple(body), comment=f"{len(names)} accumulators reduced across the warp: "
                     f"{P - 1 + LANES.bit_length() - 1 - len(halves)} exchanges, {len(names)} broadcasts")


def _gang_chain(lp: cir.For):
    """The collapsed chain of gang loops at the top of a region, and the body under it."""
    chain = [lp]
    while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], cir.For) and chain[-1].body[0].level == "gang":
        chain.append(chain[-1].body[0])
    names = {c.var for c in chain}
    for c in chain:
        if (_uses((c.extent, c.start))[0]) & names:
            raise RewriteError(f"the gang loop over {c.var} depends on another gang index: no CUDA grid for it")
    return chain, chain[-1].body


def _trip(c: cir.For):
    if c.iterations is not None:
        return c.iterations
    return c.extent if c.start == cir.Int(0) else cir.Bin("-", c.extent, c.start)


def _decompose(chain, itype: str):
    """The gang indices from the flattened block index `moac_gid` (the last one fastest)."""
    out, rest = [], cir.Var("moac_gid")
    for k, c in enumerate(reversed(chain)):
        last = k == len(chain) - 1
        idx = rest if last else cir.Bin("%", rest, _trip(c))
        out.append(cir.Decl(f"const {itype}", c.var, cir.add(c.start, idx)))
        if not last:
            rest = cir.Bin("/", rest, _trip(c))
    return list(reversed(out))


def _total(chain):
    t = _trip(chain[0])
    for c in chain[1:]:
        t = cir.mul(t, _trip(c))
    return t


def _tiles_as_text(x, itype: str, ctype: str):
    """x with every cir.Tile printed (moac.emit.tiles)."""
    if isinstance(x, cir.Tile):
        return cir.Raw(tiles.render(x, itype, ctype))
    if isinstance(x, tuple):
        return tuple(_tiles_as_text(y, itype, ctype) for y in x)
    if isinstance(x, (cir.For, cir.If, cir.Block)):
        return dataclasses.replace(x, **{f: _tiles_as_text(getattr(x, f), itype, ctype)
                                        for f in ("body", "then", "other") if hasattr(x, f)})
    return x


def split(kernels: tuple, ctype: str, itype: str, fname: str, array_types: dict, scalar_types: dict,
          tag: str = "", warps: int = 1, shared: dict | None = None):
    """C-unit kernels as host code (CKernels whose code launches the device regions) and
    the regions themselves, named FNAME_KERNEL[TAG].  `array_types`: C name -> (element ctype,
    read-only); `scalar_types`: host scalars in scope -> ctype; `itype`: index type."""
    regions: list[Region] = []
    warp: dict = {}
    comments: dict = {}
    per_kernel: dict = {}        # kernel name -> regions named after it so far

    def region(name: str, code: tuple, chain) -> cir.Raw:
        lanes = _Lanes(ctype)
        found = tiles.tiles_in(code)
        team = max((t.warps for t in found), default=1)
        w = warps if chain and team == 1 else 1
        if chain:
            total = _total(chain)
            start = cir.Var("blockIdx.x") if w == 1 else cir.Bin("+", cir.Bin("*", cir.Var("blockIdx.x"), cir.Int(w)),
                                                                   cir.Var("moac_warp"))
            step = cir.Var("gridDim.x") if w == 1 else cir.Bin("*", cir.Var("gridDim.x"), cir.Int(w))
            what = ("one block" if team == 1 else f"one block of {team} warps") if w == 1 else f"each of a block's {w} warps"
            inner = lanes.stmts(code)
            body = (cir.For("moac_gid", total, tuple(_decompose(chain, itype)) + (tiles.team_body(inner) if team > 1 else inner),
                            start=start, step=step, itype=itype,
                            comment=f"{what} per gang iteration: " + ", ".join(c.var for c in chain)),)
        else:
            total = cir.Int(1)
            body = lanes.stmts(code)
        warp.update(lanes.warp)
        reads, arrays, decls, words, stored = _uses((body, total))
        arrays.update(c for c, _, _ in lanes.counters)
        stored.update(c for c, _, _ in lanes.counters)
        if words & stored:
            raise RewriteError(f"{', '.join(sorted(words & stored))}: read in packed words and written in one kernel")
        on_chip = sorted(arrays & set(shared or {}))
        if len(on_chip) > 1:
            raise RewriteError(f"the device region {name} keeps {len(on_chip)} gang buffers on chip; "
                               "the cuda target lays out one")
        if on_chip and w > 1:
            raise RewriteError(f"the device region {name} keeps a gang buffer on chip: one warp per block only")
        ptrs = tuple((f"{'const ' if array_types[a][1] else ''}{array_types[a][0]} *__restrict__", a)
                     for a in sorted(arrays - set(on_chip)))
        own = {"moac_lane", "moac_warp", "moac_gid", "blockIdx.x", "gridDim.x", FULL.name}
        scalars = tuple((scalar_types[v], v) for v in sorted(reads - decls - arrays - own) if v in scalar_types)
        missing = sorted(reads - decls - arrays - own - set(scalar_types))
        if missing:
            raise RewriteError(f"the device region {name} reads {', '.join(missing)}, which the host does not have")
        body = _tiles_as_text(body, itype, ctype)
        smem = f"sizeof({ctype}) * (size_t)({shared[on_chip[0]]})" if on_chip else ""
        dynamic = max((tiles.shared_bytes(t) for t in found if tiles.dynamic(t)), default=0)
        if dynamic:
            if smem:
                raise RewriteError(f"the device region {name} keeps a gang buffer and tile stages in dynamic shared memory")
            smem = str(dynamic)
        regions.append(Region(name, ptrs + scalars, total, body, max(w, team), smem, tuple((a, ctype) for a in on_chip)))
        args = ", ".join(n for _, n in ptrs + scalars)
        tot = cir.expr(total)
        blocks = tot if w == 1 else f"({tot} + {w - 1}) / {w}"
        launch = (f"{name}<<<(unsigned)({blocks} < 2147483647 ? {blocks} : 2147483647), {LANES * max(w, team)}, "
                  f"{smem or 0}, moac_stream>>>({args});")
        for ctr, size, when in lanes.counters:      # the LastGang counters start at zero
            launch = (f"if ({when})\n    cudaMemsetAsync({ctr}, 0, sizeof({ctype}) * (size_t)({size}), moac_stream);\n"
                      + launch)
        for out, size, when in lanes.zeroed:        # so do the outputs of frames no gang folds
            launch = (f"if ({when})\n    cudaMemsetAsync({out}, 0, sizeof({array_types[out][0]}) * (size_t)({size}), "
                      f"moac_stream);\n" + launch)
        if smem:      # beyond 48 KiB a kernel must opt in to its dynamic shared memory
            launch = (f"if ({smem} > 49152)\n    cudaFuncSetAttribute({name}, "
                      f"cudaFuncAttributeMaxDynamicSharedMemorySize, (int)({smem}));\n{launch}")
        return cir.Raw(f"if ({tot} > 0) {{\n" + "\n".join("    " + ln for ln in launch.splitlines()) + "\n}")

    def name_for(kname: str) -> str:
        taken = per_kernel.get(kname, 0)
        per_kernel[kname] = taken + 1
        return f"{fname}_{kname}" + (f"_{taken}" if taken else "") + tag

    def host(body, kname: str) -> tuple:
        out = []
        for s in body:
            match s:
                case cir.For(level="gang"):
                    chain, inner = _gang_chain(s)
                    out.append(region(name_for(kname), inner, chain))
                case cir.Block(level="serial", body=b):
                    out.append(region(name_for(kname), b, None))
                case cir.Block(body=b):
                    out.append(dataclasses.replace(s, body=host(b, kname), pragma=None))
                case cir.If(then=t, other=o):
                    out.append(dataclasses.replace(s, then=host(t, kname), other=host(o, kname)))
                case cir.Decl(ctype=t, name=n):
                    scalar_types[n] = t
                    out.append(s)
                case _:
                    out.append(s)
        return tuple(out)

    host_code = []
    for k in kernels:
        n = len(regions)
        host_code.append(dataclasses.replace(k, code=host(k.code, k.name)))
        for r in regions[n:]:
            comments[r.name] = f"kernel {k.name}: {k.comment}" + (" (32-bit indices)" if itype == "int32_t" else "")
    return host_code, regions, warp, comments


def _cxx(params: str) -> str:
    return params.replace("*restrict ", "*__restrict__ ")


def to_cuda(unit, sig, target) -> str:
    """The CUDA source of a C unit: one `__global__` function per device region, a device
    entry launching them on a stream, a host entry copying host arrays."""
    from .codegen import OPTIONAL_HELPERS, context, kernels_text, template
    ctx = context(unit, sig, target, helper_prefix="__host__ __device__")
    arrays = {p.cname: (p.ctype, p.kind == "input") for p in sig.params if p.kind != "size"}
    arrays.update({s.cname: (unit.ctype, False) for s in unit.scratch + unit.shared})
    variants = [(unit.kernels, "int32_t" if unit.index_bits == 32 else "int64_t", "",
                 2 if unit.index_bits == 0 else 1)]
    if unit.index_bits == 0:
        variants.append((unit.kernels32, "int32_t", "_i32", 3))
    regions, warp, comments, bodies = [], {}, {}, []
    for kernels, itype, tag, indent in variants:
        scalars = {p.cname: itype for p in sig.params if p.kind == "size"}
        scalars.update({d.name: itype for d in unit.prologue if isinstance(d, cir.Decl)})
        host_code, rs, w, cm = split(kernels, unit.ctype, itype, sig.fname, arrays, scalars, tag,
                                     target.gangs_per_block, {x.cname: x.count for x in unit.shared})
        regions += rs
        warp.update(w)
        comments.update(cm)
        bodies.append(kernels_text(unit, indent, host_code))
    ctx.update(
        helpers=tuple(h for h in ctx["helpers"] if h not in (OPTIONAL_HELPERS[w] for w in replaced())),
        device_helpers=device_helpers(unit.helpers) + tuple(warp.values()),
        regions=[dict(name=r.name, comment=comments[r.name], threads=LANES * r.warps, warps=r.warps,
                      shared=[f"{t} *{a} = moac_smem_{t};   /* this gang's tile, in shared memory */"
                              for a, t in r.shared],
                      params=", ".join(f"{t} {n}" for t, n in r.params) or "void",
                      body="\n".join(ln.rstrip() for ln in cir.stmts(r.body, unit.ctype, indent=1)))
                 for r in regions],
        body=bodies[0], body32=bodies[1] if len(bodies) > 1 else "", lanes=LANES, params=_cxx(ctx["params"]), linkage='extern "C" ',
        dev_args=", ".join(f"({'const ' if p.kind == 'input' else ''}{p.ctype} *){p.cname}d"
                           if p.kind != "size" else p.cname for p in sig.params),
    )
    return template("kernel.cu.j2").render(**ctx)
