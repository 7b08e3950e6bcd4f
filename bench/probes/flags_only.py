"""A bench/cpu_ab.py variant: main's C, built with extra flags from the environment
(MOAC_AB_FLAGS, e.g. "-march=x86-64-v3"; later -march flags override -march=native)."""
import os

FLAGS = os.environ.get("MOAC_AB_FLAGS", "").split()
