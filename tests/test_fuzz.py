"""The fuzzing campaign's seeded slice (the full run is bench/fuzz_run.py, recorded in
docs/reliability.md): mutated examples and generated programs through parse -> DNF ->
ONF -> C; every input succeeds or is refused with a positioned moac error, within the
time limit, and never with a RecursionError or any other exception."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz import LIMIT, inputs, run_one
from progen import programs

SLICE = 400           # inputs per CI run (about a sixth of a minute; the suite stays under 10 minutes)


def test_mutated_examples_fail_only_with_positioned_errors():
    failures = []
    for label, data in inputs(seed=20261201, count=SLICE):
        verdict = run_one(data)
        if verdict:
            failures.append(f"{label}: {verdict}\n{data[:300]!r}")
    assert not failures, f"{len(failures)} of {SLICE} inputs failed:\n" + "\n\n".join(failures[:5])


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_statements=3))
def test_generated_programs_go_through_every_stage(case):
    source, _sizes = case
    assert run_one(source.encode("utf-8"), targets=("openacc", "openmp", "c", "cuda")) is None


@pytest.mark.parametrize("text", [
    "size n\ninput x : f32 ⟨n⟩\ny = " + "(" * 3000 + "x" + ")" * 3000 + "\noutput y\n",
    "size n\ninput x : f32 ⟨n⟩\ny = " + " + ".join(["x"] * 3000) + "\noutput y\n",
    "size n\ninput x : f32 ⟨n⟩\ny = x + " + "9" * 5000 + "\noutput y\n",
    "size n\ninput x : f32 ⟨n⟩\r\ny = x\u2028output y\x85",
])
def test_known_hard_inputs_are_refused_or_accepted_in_time(text):
    assert run_one(text.encode("utf-8"), seconds=LIMIT) is None
