"""The spec layer's vocabulary: cases, mistakes, the exercise row, the registries, the tuning
spaces and the hint texts a failing check adds about NaN.

Exercise modules (``grader/exercises/m*.py``) declare their rows with these names; the check
runner (``grader/checks.py``) and the tuner (``grader/autotune.py``) import them too. This module
imports nothing of the grader, so declaring an exercise never pulls in the runtime that grades it
(tests/runtime/test_layers.py holds the exercise modules to that).
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["BACKWARD_NAN", "Case", "EMULATOR_NAN", "Exercise", "Mistake", "PRODUCT_NAN", "REGISTRY", "SOFTMAX_NAN", "SPACES",
           "Space", "TRITON_REGISTRY", "TritonExercise", "case", "exercise", "grading_seed", "hidden", "register_space", "triton_exercise"]


@dataclass(frozen=True)
class Case:
    """One row of an exercise's test table: a name, the shape parameters, and a seed."""

    name: str
    params: dict
    seed: int = 0
    hidden: bool = False

    def describe(self, with_seed: bool = True) -> str:
        shape = ", ".join(f"{k}={v}" for k, v in self.params.items())
        seed = f", seed={self.seed}" if with_seed else ""
        return f"'{self.name}' ({shape}{seed})"


def grading_seed() -> int:
    """Seed base for hidden cases: the instructor's secret ``GRADER_SEED`` if set, else fresh
    randomness, so no submission can hard-code the outputs of a public repository's cases."""
    env = os.environ.get("GRADER_SEED")
    return int(env) if env else secrets.randbits(31)


def case(name: str, seed: int = 0, **params) -> Case:
    return Case(name, params, seed)


def hidden(name: str, **params) -> Case:
    """A grading-only case; its seed is drawn when grading (see :func:`grading_seed`)."""
    return Case(name, params, 0, hidden=True)


@dataclass(frozen=True)
class Mistake:
    """A recognisable wrong computation: if the kernel's outputs match ``wrong(p, inputs)``
    (and the correct outputs differ from it on that case), the check names ``explain``."""

    name: str
    explain: str
    wrong: Callable


@dataclass
class Exercise:
    id: str
    module: str
    kernel: str
    signature: str
    launch_shape: str  # how the kernel is launched, in words, for students
    make_inputs: Callable  # (p, rng) -> dict of host arrays (float32/...)
    outputs: dict  # name -> (p -> (shape, dtype))
    reference: Callable  # (p, inputs) -> dict name -> float64 array
    args: Callable  # (p, arrays) -> tuple of kernel args in signature order
    grid: Callable  # p -> grid
    block: Callable  # p -> block
    cases: list
    shared_mem: Callable = lambda p: 0
    scratch: dict = field(default_factory=dict)  # name -> (p -> (shape, dtype)): poisoned work arrays, not compared
    zeroed: tuple = ()  # outputs the launch expects zero-filled (kernels that accumulate with atomics)
    mistakes: list = field(default_factory=list)
    race_check: bool = False  # run one case under the race detector (and a second schedule) on the emulator
    race_case: str | None = None  # which case; default: the last visible case (a barrier race needs several tiles)
    options: tuple = ()
    # (p, inputs) -> {output: float64 array}: the size of the terms behind each expected element
    # (e.g. sum_k |a_ik b_kj| for a matmul), so the tolerance scales with the problem; see
    # grader/judge.py. None: the size of the expected value itself.
    magnitude: Callable | None = None
    # output -> (rtol, atol) on every backend, in place of the dtype's tolerance (a conversion: (0, 0))
    tolerance: dict = field(default_factory=dict)
    # (profile, p) -> None, or why the kernel misses a memory property (bank conflicts, narrow accesses):
    # judged on the emulator's memory profile of ``profile_case`` (default: the first visible case)
    # once every case's values pass; on a GPU it is skipped with a sentence
    profile_check: Callable | None = None
    profile_case: str | None = None
    # (io, p) -> None, or why the bytes the kernel moved are not the algorithm's (a causal kernel that
    # reads every K/V tile): judged on the emulator's byte counts (count_io) of ``io_case`` once the
    # values pass; on a GPU it is skipped with a sentence
    io_check: Callable | None = None
    io_case: str | None = None
    # size parameter -> its unit: the clean regrade (grader/autograde/shapes.py) redraws these sizes of
    # the hidden cases per student, keeping each value's class in that unit (a multiple stays a
    # multiple, one past stays one past, ragged stays ragged with the same parity); "d" is a runtime
    # head dimension (kept within 2..127, its divisibility by 8 kept). Parameters not named here are
    # never redrawn: counts, compile-time sizes (-DHEAD_DIM), sizes the contract ties to others.
    hidden_sizes: dict = field(default_factory=dict)
    # where a NaN the kernel computed usually comes from in this kind of kernel, after the general
    # "inf - inf, 0 * inf or 0 / 0"; None: the softmax's causes (attention and softmax kernels)
    nan_causes: str | None = None
    # the NVRTC architecture the kernel needs beyond the course's sm_80/sm_90 ("sm_90a": wgmma, TMA):
    # on a GPU without it check, bench and tune refuse with a sentence; the emulator runs it;
    # `python -m grader compile --exercise ID` builds it for that architecture only
    requires: str | None = None

    def visible_cases(self):
        return [c for c in self.cases if not c.hidden]


REGISTRY: dict[str, Exercise] = {}


def exercise(**kwargs) -> Exercise:
    ex = Exercise(**kwargs)
    if ex.id in REGISTRY:
        raise ValueError(f"exercise {ex.id!r} declared twice")
    REGISTRY[ex.id] = ex
    return ex


@dataclass
class TritonExercise:
    """An exercise whose answer is a ``%%triton NAME`` cell: Triton kernels and a launcher
    ``NAME(*tensors, *numbers)`` that the check calls with torch tensors on the device Triton runs
    on (CPU tensors in the interpreter). Outputs come preallocated and poisoned, as for CUDA."""
    id: str
    module: str
    kernel: str  # the launcher's name (the %%triton line's NAME)
    signature: str
    launch_shape: str  # what the launcher is given and must launch, in words
    make_inputs: Callable  # (p, rng) -> dict name -> host array (float16, or bfloat16 bits as uint16)
    outputs: dict  # name -> (p -> (shape, dtype))
    reference: Callable  # (p, inputs) -> dict name -> float64 array
    args: Callable  # (p, tensors: SimpleNamespace) -> the launcher's arguments in order
    cases: list
    mistakes: list = field(default_factory=list)
    magnitude: Callable | None = None
    tolerance: dict = field(default_factory=dict)
    # input name -> (p -> axes order): the tensor handed over is a transposed *view* of storage laid
    # out in that order (e.g. Q stored [B, N, H, d], passed as [B, H, N, d]): a launcher must use strides
    views: Callable | None = None
    # (macs, p) -> None or why: the multiply-adds tl.dot did (interpreter only), judged on work_case
    work_check: Callable | None = None
    work_case: str | None = None
    hidden_sizes: dict = field(default_factory=dict)  # as Exercise.hidden_sizes
    time_limit: float = 60.0  # CPU seconds per case in the interpreter
    # p -> (rtol, atol) every output gets on this case, on every backend, in place of its dtype's: float32
    # outputs of products taken in half precision (the backward's tl.dot on P and dS), whose precision is
    # the inputs' dtype, not the outputs'
    case_tolerance: Callable | None = None
    nan_causes: str | None = None  # as Exercise.nan_causes
    kind: str = "triton"

    def visible_cases(self):
        return [c for c in self.cases if not c.hidden]


TRITON_REGISTRY: dict[str, TritonExercise] = {}


def triton_exercise(**kwargs) -> TritonExercise:
    ex = TritonExercise(**kwargs)
    if ex.id in REGISTRY or ex.id in TRITON_REGISTRY:
        raise ValueError(f"exercise {ex.id!r} declared twice")
    TRITON_REGISTRY[ex.id] = ex
    return ex


# --------------------------------------------------------------------------- NaN hints

EMULATOR_NAN = ("  On the emulator shared memory also starts as NaN, so reading a tile element no thread stored "
                "(edges of a partial tile not zero-filled) shows up here.")


SOFTMAX_NAN = ("e.g. exp(m_old - m_new) when both maxima are -inf (no key seen yet, or all masked: subtract 0 "
               "instead), or l = 0 for a row with no keys.")
BACKWARD_NAN = ("in a backward kernel, e.g. P = exp(scale*s - L) with a wrong L (-inf, or the row's L not read), "
                "0 * inf in dS = P * (dP - D) once D or dP has overflowed, or an operand read from a shared tile "
                "position no thread stored (with a block-wide product: the rows of a warp that skipped the tile "
                "must still be written, as zeros).")
PRODUCT_NAN = ("the inputs here are finite, so an operand was not an input element: a value read from a tile "
               "position no thread stored, or a fragment register used before anything was loaded into it.")


# --------------------------------------------------------------------------- tuning spaces


@dataclass(frozen=True)
class Space:
    """The configurations of one exercise's kernel. ``grid``, ``block`` and ``shared_mem`` take
    the exercise's parameters ``p`` (a case's, or the benchmark shape's) and a configuration
    ``cfg`` (macro -> value); ``exclude(cfg)`` returns None, or why that combination is not tried;
    ``row_fields(cfg)``, where given, returns other fields of the exercise row that depend on the
    configuration (an ``io_check`` that counts tiles of BLOCK_ROWS rows)."""

    exercise: str
    params: dict
    grid: Callable
    block: Callable
    shared_mem: Callable = lambda p, cfg: 0
    exclude: Callable | None = None
    row_fields: Callable | None = None


SPACES: dict[str, Space] = {}


def register_space(space: Space) -> Space:
    for name, values in space.params.items():
        if not isinstance(values, tuple) or not values:
            raise ValueError(f"autotune space for {space.exercise}: {name} must be a non-empty tuple of values")
    SPACES[space.exercise] = space
    return space
