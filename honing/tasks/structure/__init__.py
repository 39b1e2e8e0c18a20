"""The structure domain (3D / structural modelling): scenes of typed operations, checked and
rendered in the sandbox by kernel.py (numpy + manifold3d, a named runtime), which runtime.py
builds and runs. kernel.py is a program, never imported on the host."""

from honing.tasks.structure.runtime import RUNTIME, ensure_runtime, kernel_pool, run_kernel

__all__ = ["RUNTIME", "ensure_runtime", "kernel_pool", "run_kernel"]
