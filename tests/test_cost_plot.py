"""moac cost --plot: the roofline drawn from the figures `moac cost` prints."""
from __future__ import annotations

import builtins
import re
from pathlib import Path

import pytest

import moac
from moac import cli, cost, hardware

ROOT = Path(__file__).resolve().parent.parent
GQA = ["examples/decode_gqa.moa", "-D", "hq=32", "-D", "hkv=8", "-D", "dk=128", "-D", "dv=128", "-D", "n=8192"]
GQA_SIZES = {"hq": 32, "hkv": 8, "dk": 128, "dv": 128, "n": 8192}


def test_plotted_intensities_are_the_ones_cost_reports():
    prog = moac.load("examples/decode_gqa.moa")
    hw = [hardware.HARDWARE["H200"]]
    r = cost.roofline_points(prog, GQA_SIZES, hw, kv_dtype="bf16")
    text = cost.report(prog, GQA_SIZES, hw, None, "bf16")
    shown = dict(re.findall(r"intensity +([0-9.]+) flop/byte (per token|for this call)", text))
    points = {p.label: p.intensity for p in r.points}
    assert set(points) == {"per token (n → ∞)", "this call"}
    assert f"{points['this call']:.2f}" == [k for k, v in shown.items() if v == "for this call"][0] == "3.34"
    assert f"{points['per token (n → ∞)']:.2f}" == [k for k, v in shown.items() if v == "per token"][0] == "4.11"
    c = cost.analyse(prog, GQA_SIZES, storage={"K": "bf16", "V": "bf16"})
    assert points["this call"] == float(c.flops.xreplace(c.values)) / float(c.traffic.xreplace(c.values))
    assert r.hardware == tuple(hw)
    h200 = hw[0]
    assert cost.Roofline.attainable(h200, 2.0) == 2.0 * h200.bandwidth        # on the slope
    assert cost.Roofline.attainable(h200, 1e4) == h200.fp32                   # under the flat peak


def test_only_the_per_token_intensity_without_every_size():
    r = cost.roofline_points(moac.load("examples/decode_gqa.moa"), {"hq": 32, "hkv": 8, "dk": 128, "dv": 128}, [])
    assert [p.label for p in r.points] == ["per token (n → ∞)"]
    assert r.points[0].intensity == pytest.approx(2.056, abs=0.005)            # f32 K and V: half of bf16's
    # (the score partials' sums, 7 adds per token and head beyond the 256 flops of its dot product)


def test_png_is_written(tmp_path, capsys):
    out = tmp_path / "roof.png"
    assert cli.main(["cost", *GQA, "--hardware", "H200", "--hardware", "A100", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert printed.startswith("cost of examples/decode_gqa.moa")
    assert printed.rstrip().endswith(f"plot          {out} (roofline: per token (n → ∞), this call)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roof.png"]          # no temporary left


def test_svg_is_written_with_the_measured_cpu(tmp_path, capsys):
    out = tmp_path / "roof.svg"
    assert cli.main(["cost", "examples/matmul.moa", "-D", "n=64", "-D", "m=64", "-D", "p=64", "--hardware", "cpu",
                     "--plot", str(out)]) == 0
    svg = out.read_text(encoding="utf-8")
    assert "<svg" in svg
    assert "GFLOP/s" in svg and "TFLOP/s" not in svg       # a CPU's figures in GB/s and GFLOP/s


def test_without_matplotlib_a_one_line_error(tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kw):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kw)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    out = tmp_path / "roof.png"
    assert cli.main(["cost", *GQA, "--plot", str(out)]) == 1
    got = capsys.readouterr()
    assert got.out == ""                                    # nothing printed before the error
    assert got.err == ("examples/decode_gqa.moa: error: moac cost --plot needs matplotlib "
                       "(pip install 'moac[plot]')\n")
    assert not out.exists()


@pytest.mark.parametrize("args,message", [
    (["examples/decode_gqa.moa", "--plot", "roof.pdf"], "--plot writes a .png or an .svg file, got 'roof.pdf'"),
    (["examples/matmul.moa", "--plot", "roof.png"], "--plot: no intensity to plot (fix every size with -D)"),
], ids=["format", "no-sizes"])
def test_plot_user_errors(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [str(ROOT / a) if a.startswith("examples/") else a for a in args]
    assert cli.main(["cost", *args]) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"error: {message}\n") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
