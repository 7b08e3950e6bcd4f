"""Probe only, not the product path (its outputs are wrong): a generated OpenACC C file with
the indices of gang scratch buffers masked to a small region, so that the buffer stays in
L2 instead of spanning every chunk of the problem.  Timing the result next to the
unedited file says what the scratch's round trips through DRAM cost; gangs overwrite each
other's entries, so the outputs mean nothing.

    python3 bench/probes/acc_scratch_l2_edit.py IN.c OUT.c BUFFER[,BUFFER…] [LOG2_FLOATS]

Every `BUFFER[i]` becomes `BUFFER[(i) & (2^L − 1)]` and every packed read
`moac_sword(BUFFER, w)` (8-byte words) `moac_sword(BUFFER, (w) & (2^(L−1) − 1))`, so a
word still covers the same two floats.  L defaults to 20 (4 MiB of floats)."""
import sys


def close(text: str, i: int, opening: str, closing: str) -> int:
    """Index of the bracket closing the one opened just before i."""
    depth = 1
    while depth:
        ch = text[i]
        depth += ch == opening
        depth -= ch == closing
        i += 1
    return i - 1


def mask(text: str, buf: str, bits: int) -> tuple[str, int]:
    out, i, count = [], 0, 0
    subscript, packed = f"{buf}[", f"moac_sword({buf}, "
    while True:
        a, b = text.find(subscript, i), text.find(packed, i)
        hits = [(p, kind) for p, kind in ((a, "sub"), (b, "word")) if p >= 0]
        if not hits:
            break
        p, kind = min(hits)
        if kind == "sub" and p > 0 and (text[p - 1].isalnum() or text[p - 1] == "_"):
            out.append(text[i:p + len(subscript)])
            i = p + len(subscript)
            continue
        start = p + len(subscript if kind == "sub" else packed)
        end = close(text, start, *("[]" if kind == "sub" else "()"))
        m = (1 << bits) - 1 if kind == "sub" else (1 << (bits - 1)) - 1
        out.append(text[i:start] + f"({text[start:end]}) & {m}")
        i = end
        count += 1
    out.append(text[i:])
    return "".join(out), count


def main() -> int:
    src, dst, bufs = sys.argv[1:4]
    bits = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    text = open(src).read()
    for buf in bufs.split(","):
        text, n = mask(text, buf, bits)
        print(f"{buf}: {n} indices masked to 2^{bits} floats")
    open(dst, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
