"""Shared by the score-pass probes (acc_quarter_lanes_edit.py, acc_inverted_scores_edit.py):
finding the lanes-over-d score pass in a generated OpenACC C file of GQA (4 heads a gang,
d = 128, bf16 K, f32 Q), room for the lanes' partial sums after the score buffer, and the
pass that adds a token's partials.  Probe code only, not the product path."""
import re


def locate(text: str, parts: int) -> dict:
    """The first (32-bit) kernel's pass 1 (`start` … `end` of `text`, its `indent`), the
    workspace's score buffer made parts + 1 times as large (its size `X`: the partials at
    moac_p + X), and the pass's K and q word indices and score stores (`kexpr`, `qexpr`,
    `pidx`, the last with the token l_)."""
    m = re.search(r"float \*moac_p = \(float \*\)\(ws \+ ws_off\);\n\s*ws_off \+= \(sizeof\(float\) \* \(size_t\)\((.*)\) "
                  r"\+ 255\) / 256 \* 256;", text)
    X = m.group(1)
    old = f"sizeof(float) * (size_t)({X})"
    assert text.count(old) == 2, text.count(old)
    text = text.replace(old, f"sizeof(float) * (size_t)({parts + 1} * ({X}))")
    i = text.index("for (int32_t cq = 0; cq < cn / 8; ++cq) {")
    start = text.rindex("#pragma acc loop seq", 0, i)
    end = text.index("float zg0 = 0.0f;", i)
    seg = text[start:end]
    indent = re.search(r"\n( *)#pragma acc loop seq\s*$", text[:start + len("#pragma acc loop seq")]).group(1)
    qexpr = re.search(r"q0_2w = moac_word\(Q_, ([^;]*)\);", seg).group(1)
    assert "2 * v" in qexpr, qexpr
    return dict(text=text, start=start, end=end, indent=indent, X=X, qexpr=qexpr,
                kexpr=re.search(r"moac_word\(K_, (32 \* t0 \+ v[^;]*)\);", seg).group(1),
                pidx=[re.search(r"moac_p\[(.*)\] = sc0_%d;" % r, seg).group(1).replace("t0", "l_") for r in range(4)])


def bits(word: str, hi: bool) -> str:
    return f"moac_bits_to_f32((uint32_t)({word}{' >> 32' if hi else ''}))"


def sum_pass(X: str, parts: int, pidx: list) -> list:
    """Lanes over the tokens: a token's partials added, scaled, stored as its score, and the
    chunk maximum of each head."""
    L = ["#pragma acc loop vector reduction(max:mg0, mg1, mg2, mg3)",
         "for (int32_t c = 0; c < cn; ++c) {  /* probe: a token's partials, its score, the chunk maximum */",
         "    int32_t l_ = c + chunk * g;"]
    for r in range(4):
        at = f"(({X}) + {parts} * ({pidx[r]})) / 2"
        L += [f"    uint64_t p{r}w{k} = moac_word(moac_p, {at} + {k});" for k in range(parts // 2)]
        total = " + ".join(bits(f"p{r}w{k}", h) for k in range(parts // 2) for h in (0, 1))
        L += [f"    float sc{r} = ({total}) / sqrtf((float)128);",
              f"    moac_p[{pidx[r]}] = sc{r};",
              f"    mg{r} = fmaxf(mg{r}, sc{r});"]
    return L + ["}"]


def splice(at: dict, lines: list) -> str:
    """The text with pass 1 replaced by `lines` (at its indent)."""
    ind = at["indent"]
    return at["text"][:at["start"]] + ("\n" + ind).join(lines) + "\n" + ind + at["text"][at["end"]:]
