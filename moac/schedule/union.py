"""The elements several ψ-selections of one array touch together (boxes: equal, nested,
disjoint, overlapping on one axis or several), the program's size conditions as facts that
decide their signs, and the minimum reads of a DNF.  sympy only."""
from __future__ import annotations

import functools
import itertools

import sympy as sp

from ..dnf import DNF, DOp, DRead, DReduce, DSelect
from ..dnf.walk import replace_sizes
from ..front.data import has_data
from .index import data_terms, footprint, guard_branches, narrow_update, nonnegative, size_key, sum_dependent


def _progressions(index: tuple, extents: dict, starts: dict):
    """The ψ-selection's elements as one arithmetic progression per axis, (first, step,
    count): a constant is (c, 0, 1), and s·v + c with s a nonzero integer and v one variable
    running over [start, start + extent) is (its value at the start, s, extent); None
    otherwise."""
    out = []
    for i in index:
        i = sp.sympify(i)
        syms = [v for v in i.free_symbols if v in extents]
        if not syms:
            out.append((i, sp.Integer(0), sp.Integer(1)))
            continue
        if len(syms) != 1:
            return None
        v = syms[0]
        lo, n = sp.sympify(starts.get(v, 0)), sp.sympify(extents[v])
        step = sp.expand(i.xreplace({v: v + 1}) - i)
        if not (step.is_Integer and step != 0):
            return None
        out.append((sp.expand(i.xreplace({v: lo})), step, n))
    return tuple(out)


def _box(index: tuple, extents: dict, starts: dict):
    """The ψ-selection's elements as a box, one half-open interval [lo, hi) per axis, when
    every component is a constant or v + c, c − v of one variable v (`_progressions` of
    steps 0 and ±1); None otherwise."""
    prog = _progressions(index, extents, starts)
    if prog is None or any(abs(s) > 1 for _, s, _ in prog):
        return None
    return tuple((first, first + 1) if s == 0 else (first, sp.expand(first + n)) if s == 1
                 else (sp.expand(first - n + 1), sp.expand(first + 1)) for first, s, n in prog)


def _strided(accesses: list, fps: list):
    """Reads of which some have a stride (x[2·j + 1], a step of 2; boxes cannot say them):
    the footprints of the distinct progressions added up. Exact where
    they are disjoint (the even elements and the odd ones) or equal; an upper bound where
    they overlap otherwise; not capped by the array. None where a read is not a
    progression on every axis."""
    progs = [_progressions(idx, ext, st) for idx, ext, st in accesses]
    if any(p is None for p in progs):
        return None
    seen: list = []
    total = sp.Integer(0)
    for p, fp in zip(progs, fps):
        if not any(_equal(p, q) for q in seen):
            seen.append(p)
            total += fp
    return sp.expand(total)


def _equal(xs, ys) -> bool:
    """Two tuples of expressions (intervals, boxes, progressions) equal item by item."""
    if isinstance(xs, tuple) and isinstance(ys, tuple):
        return len(xs) == len(ys) and all(_equal(x, y) for x, y in zip(xs, ys))
    return sp.expand(xs - ys) == 0


def ordered(x, y, facts: tuple = ()):
    """(the smaller, the larger) of x and y where the sizes' facts decide it (x first where
    both hold), else None."""
    if nonnegative_given(sp.expand(y - x), facts):
        return x, y
    if nonnegative_given(sp.expand(x - y), facts):
        return y, x
    return None


def _min(x, y, facts: tuple):
    """min(x, y), as one of them where the facts decide it: an array against a union of
    reads compared at sizes of 64 (size_key) took the whole array for two reads of L at
    offsets 1 and n − L."""
    o = ordered(x, y, facts)
    return sp.Min(x, y) if o is None else o[0]


def _max(x, y, facts: tuple):
    """max(x, y), as one of them where the facts decide it (x where both hold)."""
    o = ordered(y, x, facts)
    return sp.Max(x, y) if o is None else o[1]


def _provably_le(a, b) -> bool:
    from ..front.core import provably
    return provably(sp.Le(sp.expand(a - b), 0))


def union_footprint(accesses: list, shape: tuple, boxes_exact: bool = True, facts: tuple = (),
                    capped: bool = True) -> sp.Expr:
    """Distinct elements that several ψ-selections of one array touch together: each is
    (index, extents, starts).  Boxes (`_box`) that are equal count once, a box inside
    another not at all, and boxes that are pairwise disjoint on some axis add up (the two
    sides of a catenation that read one array: a cache's first rows and its last ones).
    Boxes that overlap otherwise count as their union, by inclusion–exclusion
    (`_overlapping`: (n △ x) # (m △ x) reads n + m − min(n, m) elements of x), where the
    boxes are the elements read (`boxes_exact`: not where an index goes through a row the
    kernel picks) and there are at most OVERLAP_BOXES of them, or by one sweep where more
    differ on one axis only (`_swept`: a stencil's taps); `facts` are what the sizes
    satisfy (`size_facts`).  Reads with a stride add up (`_strided`).  Where that does not
    decide it, the largest single footprint, as for one access.  A union is at most the
    array where `capped` (else its caller caps it)."""
    fps = [footprint(idx, shape, ext) for idx, ext, _ in accesses]
    largest = max(fps, key=size_key)
    if len(accesses) == 1:
        return largest
    size = sp.Mul(*shape) if shape else sp.Integer(1)
    boxes = [_box(idx, ext, st) for idx, ext, st in accesses]
    if any(b is None for b in boxes):
        strided = _strided(accesses, fps)
        if strided is None:
            return largest
        return _min(strided, size, facts) if capped else strided
    distinct: list = []
    for b in boxes:
        if not any(_equal(b, c) for c in distinct):
            distinct.append(b)

    def inside(b, c):
        return all(_provably_le(y[0], x[0]) and _provably_le(x[1], y[1]) for x, y in zip(b, c))
    distinct = [b for k, b in enumerate(distinct) if not any(k != j and inside(b, c) and not inside(c, b)
                                                              for j, c in enumerate(distinct))]
    where = {id(b): (idx, ext) for b, (idx, ext, _) in zip(boxes, accesses)}

    def volume(b):          # a box's elements; an extent read from data sums over what it depends on
        idx, ext = where[id(b)]
        return sum_dependent(idx, [hi - lo for lo, hi in b], ext)
    apart = all(any(_provably_le(x[1], y[0]) or _provably_le(y[1], x[0]) for x, y in zip(b, c))
                for k, b in enumerate(distinct) for c in distinct[k + 1:])
    if apart:
        total = sp.expand(sum((volume(b) for b in distinct), sp.Integer(0)))
    else:
        total = None
        if boxes_exact:
            total = _overlapping(distinct, facts)
            if total is None:
                total = _swept(distinct, facts)
        if total is None:
            return largest
        return _min(total, size, facts) if capped else total
    over = sp.expand(total - size)
    return size if nonnegative(over) else total


OVERLAP_BOXES = 3       # inclusion–exclusion over at most this many boxes (2^3 − 1 intersections): with
                        # four, deciding the signs of the intersections took minutes (front.core._bounded)


def _overlapping(boxes: list, facts: tuple):
    """The elements of the union of boxes that overlap, exactly, by inclusion–exclusion:
    Σ over the non-empty subsets S of (−1)^(|S|+1) |∩S|, an intersection's length on an axis
    max(0, min hi − max lo).  None where a bound reads data (its sign is the data's) or there
    are more than OVERLAP_BOXES boxes."""
    if len(boxes) > OVERLAP_BOXES or any(has_data(sp.sympify(e)) for b in boxes for ax in b for e in ax):
        return None
    total = sp.Integer(0)
    for r in range(1, len(boxes) + 1):
        for subset in itertools.combinations(boxes, r):
            vol = sp.Integer(1)
            for axis in zip(*subset):
                lo, hi = sp.Max(*(x[0] for x in axis)), sp.Min(*(x[1] for x in axis))
                vol *= lo_hi_length(lo, hi, facts)
            total += (-1) ** (r + 1) * vol
    return sp.expand(total)


def _swept(boxes: list, facts: tuple):
    """The union of boxes that differ on one axis only (shifts of one read: a stencil's
    taps), exactly and in one pass however many there are: with the intervals [lo, hi) of
    that axis in order of lo, each adds max(0, min(hi − lo, hi − H)), H the largest hi before
    it, times the other axes' lengths: taps of one length L at steps of 1 add min(L, 1) each,
    one atom however many taps (as hi − max(lo, H), each tap had a max of its own, and
    deciding the signs of sums of k of them took minutes from k = 8).  None where the boxes
    differ on two axes, a bound reads data, the sizes' facts do not order the lo's, or more
    than SWEPT_ATOMS mins and maxes stay undecided (reads of several lengths)."""
    if any(has_data(sp.sympify(e)) for b in boxes for ax in b for e in ax):
        return None
    differ = [a for a in range(len(boxes[0])) if not all(_equal(b[a], boxes[0][a]) for b in boxes[1:])]
    if len(differ) != 1:
        return None
    a = differ[0]
    rest = sp.Integer(1)
    for k, (lo, hi) in enumerate(boxes[0]):
        if k != a:
            rest *= lo_hi_length(lo, hi, facts)
    ivs = [b[a] for b in boxes]
    for i in range(1, len(ivs)):            # insertion sort by lo, each comparison proved
        j = i
        while j > 0:
            before, here = ivs[j - 1][0], ivs[j][0]
            o = ordered(before, here, facts)
            if o is None:
                return None
            if o[0] is before:
                break
            ivs[j - 1], ivs[j] = ivs[j], ivs[j - 1]
            j -= 1
    total, top = sp.Integer(0), None
    for lo, hi in ivs:
        new = sp.expand(hi - lo) if top is None else _min(sp.expand(hi - lo), sp.expand(hi - top), facts)
        total += lo_hi_length(sp.Integer(0), new, facts)
        top = hi if top is None else _max(top, hi, facts)
    total = sp.expand(rest * total)
    return total if len(total.atoms(sp.Min, sp.Max)) <= SWEPT_ATOMS else None


SWEPT_ATOMS = 8         # a swept union with more undecided mins and maxes than this is not used: capping it
                        # by the array took 0.5 s with 8 (4 reads of 3 lengths), 18 s with 17 (7 reads)


def lo_hi_length(lo, hi, facts: tuple = ()) -> sp.Expr:
    """max(0, hi − lo): hi − lo where it is ≥ 0 provably or by a fact f ≥ 0 of the sizes
    that it exceeds (n − h where the program requires h ≤ n), 0 where it is ≤ 0 provably,
    and the max where the sign depends on the sizes (n − 2·h; n − 2, 0 at n = 1)."""
    return _max(sp.expand(hi - lo), sp.Integer(0), facts)


@functools.lru_cache(maxsize=4096)
def nonnegative_given(e, facts: tuple = (), depth: int = 0) -> bool:
    """e ≥ 0 for all sizes that satisfy the facts (each f ≥ 0, `size_facts`): provably, or
    e = c·(f + r) with c a product of sizes and r ≥ 0 provably (dk·(40 − n) ≥ 0 by n + 1 ≤ 40),
    or through a min or max M that e holds linearly, as front.core._bounded does without
    the facts: e with M replaced by each of its arguments (N − max(m, n) ≥ 0 by n ≤ N and
    m ≤ N), or by one of them where M bounds e from below."""
    e = sp.expand(e)
    if nonnegative(e) or _provably_le(0, e):
        return True
    if facts and depth < 2:
        ms = [m for m in e.atoms(sp.Min, sp.Max) if not any(m in x.args for x in e.atoms(sp.Min, sp.Max))]
        for m in ms:
            c = e.coeff(m)
            if not c.is_number or c == 0 or sp.expand(e - c * m).has(m):
                continue
            cases = (nonnegative_given(e.xreplace({m: a}), facts, depth + 1) for a in m.args)
            below = (c > 0) == isinstance(m, sp.Max)       # c·M ≥ c·a for every argument a
            if any(cases) if below else all(cases):
                return True
    core = sp.factor_terms(e)
    if isinstance(core, sp.Mul):            # the sizes and positive numbers it is a multiple of
        kept = [x for x in core.args if not (x.is_positive or (x.is_Symbol and x.is_nonnegative))]
        core = sp.Mul(*kept)
    core = sp.expand(core)
    return nonnegative(core) or any(_provably_le(0, sp.expand(core - f)) for f in (0, *facts))


def size_facts(constraints: tuple, subs: dict) -> tuple:
    """What the program's size conditions say, as expressions ≥ 0 (h ≤ n: n − h), at the
    sizes `subs` fixes; conditions over data elements (Constraint.over) say nothing of sizes."""
    facts = []
    for c in constraints:
        cond = c.cond
        if c.over or not isinstance(cond, (sp.LessThan, sp.StrictLessThan, sp.GreaterThan, sp.StrictGreaterThan)):
            continue
        small, big = (cond.lhs, cond.rhs) if isinstance(cond, (sp.LessThan, sp.StrictLessThan)) else (cond.rhs, cond.lhs)
        facts.append(sp.expand(replace_sizes(big - small, subs)))
    return tuple(facts)


def needed_reads(d: DNF, subs: dict) -> dict:
    """For each input, the elements the outputs depend on (the DNF's read footprint): the
    union of its reads' footprints (`union_footprint`)."""
    shapes = {i.name: tuple(sp.sympify(x).xreplace(subs) for x in i.shape) for i in d.program.inputs}
    found: dict = {}

    def data(exprs, ext, lo):            # integer inputs read in indices, extents and guards
        for r in data_terms(exprs):
            if r.func.__name__ in shapes:
                found.setdefault(r.func.__name__, []).append((tuple(replace_sizes(x, subs) for x in r.args),
                                                              ext, lo))

    def walk(e, ext, lo):
        match e:
            case DRead(array=a, index=idx) if a in shapes:
                found.setdefault(a, []).append((tuple(replace_sizes(x, subs) for x in idx), ext, lo))
                data(idx, ext, lo)
            case DRead(index=idx):
                data(idx, ext, lo)
            case DOp(args=args):
                for x in args:
                    walk(x, ext, lo)
            case DReduce(var=v, extent=n, body=b):
                data((n,), ext, lo)
                walk(b, {**ext, v: replace_sizes(n, subs)}, {k: x for k, x in lo.items() if k != v})
            case DSelect(cond=c, then=t, other=o):
                data((c,), ext, lo)
                runs, boxes = guard_branches(replace_sizes(c, subs), ext, lo)
                before = {} if boxes else {a: len(x) for a, x in found.items()}
                for k, ext2, lo2 in runs:
                    walk((t, o)[k], ext2, lo2)
                if not boxes:
                    loose.update(a for a, x in found.items() if len(x) > before.get(a, 0))

    loose: set = set()
    for st in d.stmts:
        body, starts = narrow_update(st, st.body)
        ext = {v: replace_sizes(n - starts.get(v, 0), subs) for v, n in zip(st.vars, st.shape)}
        lo = {v: replace_sizes(starts[v], subs) for v in st.vars if v in starts}
        data(st.at, ext, lo)                    # a scatter's index read from data
        walk(body, ext, lo)
    facts = size_facts(d.program.constraints, subs)
    return {a: union_footprint(accs, shapes[a], boxes_exact=a not in loose, facts=facts) for a, accs in found.items()}
