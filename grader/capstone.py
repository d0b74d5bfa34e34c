"""``python -m grader bench capstone FILE``: module 11's kernel timed in every configuration
(fp16/bf16 x d 64/128 x causal/not) with the launch choices tuned on the H100, beside SDPA's flash
backend (the target) and cuDNN. Each build is checked on its visible cases before it is timed."""
from __future__ import annotations

from dataclasses import dataclass

from . import benchspec
from .backend import backend as active_backend
from .errors import BackendUnavailableError
from .benchmark import BenchReport, Budget, bench
from .exercise_rows import REGISTRY
from .exercises import m11_capstone as m11

FLASH, CUDNN = "FLASH_ATTENTION", "CUDNN_ATTENTION"


def build(dtype: str, d: int, causal: bool, cfg: dict | None = None) -> str:
    """The exercise id of one build of the capstone row, registered for this process so that the
    checks, the benchmark and the tuner accept it like any exercise."""
    ex, spec = m11.variant(d, dtype, causal, cfg, register=False)
    REGISTRY.setdefault(ex.id, ex)
    benchspec.SPECS.setdefault(ex.id, spec)
    return ex.id


@dataclass
class Row:
    dtype: str
    d: int
    causal: bool
    S: int
    cfg: dict
    report: BenchReport

    def _baseline(self, backend):
        return next((b for b in self.report.baselines if b.backend == backend and b.ran), None)

    def cells(self) -> list[str]:
        k, flash, cudnn = self.report.kernel, self._baseline(FLASH), self._baseline(CUDNN)
        if not self.report.check_passed:
            return [self.dtype, str(self.d), "yes" if self.causal else "no", str(self.S),
                    "check failed: " + self.report.check_message.splitlines()[0][:60], "", "", "", "", ""]
        choices = " ".join(f"{name}={value}" for name, value in self.cfg.items())
        return [self.dtype, str(self.d), "yes" if self.causal else "no", str(self.S), choices, f"{k.ms:.4g}",
                f"{k.tflops:.4g}",
                f"{flash.tflops:.4g} ({flash.ms / k.ms:.2f}x)" if flash else "-",
                f"{cudnn.tflops:.4g} ({cudnn.ms / k.ms:.2f}x)" if cudnn else "-",
                "" if flash is None or flash.ms / k.ms >= 1.0 else "below SDPA flash"]


HEADER = ["dtype", "d", "causal", "S", "choices", "ms", "TFLOP/s", "SDPA flash TFLOP/s (yours vs it)",
          "cuDNN TFLOP/s (yours vs it)", ""]


def table(rows: list[Row]) -> str:
    lines = [HEADER] + [r.cells() for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def bench_capstone(kernel, *, seqs=(4096,), configs=None, choices: dict | None = None, repeats: int = 1,
                   budget: Budget | None = None, baselines: bool = True) -> list[Row]:
    """Check and time ``kernel`` (its source, or the kernel ``%%cuda`` made) in each of ``configs``
    ((dtype, d, causal) triples; default all 8) at B=4, H=16 and every S of ``seqs``. The launch
    choices are ``choices`` where given (one dict for every configuration), else the ones tuned on
    the H100 (benchmarks/results/capstone.json), else the graded rows' (m11_capstone.CONFIG)."""
    if active_backend() != "gpu":
        raise BackendUnavailableError(
            "python -m grader bench capstone times your kernel on a GPU; the CPU emulator does not model speed. "
            "Here, check it instead: python -m grader check capstone_fwd_d64 FILE --all (and capstone_fwd_d128, "
            "capstone_fwd_causal_d64, capstone_fwd_bf16_causal_d128, the builds that are graded).")
    tuned = m11.tuned_configs()
    rows = []
    for dtype, d, causal in configs or m11.CONFIGS:
        cfg = dict(choices) if choices else tuned[(dtype, d, causal)]
        ex_id = build(dtype, d, causal, cfg)
        for s in seqs:
            report = bench(ex_id, kernel, dtype=dtype, shape=dict(S=s), repeats=repeats, budget=budget,
                           baselines=baselines)
            rows.append(Row(dtype, d, causal, s, cfg, report))
    return rows
