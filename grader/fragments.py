"""Where each matrix element lives in a warp's registers: the PTX ISA's fragment layouts, once.

The tensor-core instructions spread a small matrix over the 32 lanes of a warp; which lane holds
which element is fixed by the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
type", "... for mma.m16n8k8", and ldmatrix's "fragment layout for one 8x8 matrix"). Everything
in the course that needs those layouts takes them from here: the emulator (through the C++ tables
``python -m grader.fragments`` writes into ``emulator/include/emu_fragments.hpp``), the tests,
and the figures of the readings.

Conventions. A 32-bit register holds two 16-bit values; ``half`` 0 is its lower 16 bits, which
hold the element of lower column index (lower row index for B). With ``g = lane >> 2`` (the PTX
"groupID") and ``t = lane % 4`` ("threadID_in_group"):

* A, m16 x k16, 4 registers: register r holds row ``g + 8 * (r % 2)``, columns
  ``2t + 8 * (r // 2)`` and the next one. So r0 is the top-left 8x8 quadrant, r1 the bottom-left,
  r2 the top-right, r3 the bottom-right.
* A, m16 x k8, 2 registers: register r holds row ``g + 8r``, columns ``2t, 2t + 1``.
* B, k16 x n8, 2 registers: register r holds rows ``2t + 8r`` and the next one, column ``g``.
  B is the "col" operand: a register packs two consecutive *rows* of one column.
* B, k8 x n8, 1 register: rows ``2t, 2t + 1``, column ``g``.
* C and D, m16 x n8, 4 floats: element i is row ``g + 8 * (i // 2)``, column ``2t + i % 2``.
* ldmatrix, one 8x8 matrix of 16-bit values per register: lane ``8m + j`` gives the address of
  row j of matrix m (x1 reads the addresses of lanes 0-7, x2 of lanes 0-15, x4 of all). Register m
  of lane L then holds, from matrix m, row ``L // 4``, columns ``2 * (L % 4)`` and the next one;
  with ``.trans``, column ``L // 4`` of rows ``2 * (L % 4)`` and the next one. (Row and column
  count as stored: a row is the 16 bytes one address points at.)

WMMA (``nvcuda::wmma``) leaves the element order of its fragments unspecified. The emulator
builds its 16x16x16 fragments from the m16n8k16 ones (``wmma_element``): matrix_a is the A
fragment, matrix_b and the accumulator are two n8 halves side by side (elements 0-3: columns 0-7,
elements 4-7: columns 8-15). Code that relies on that order is wrong on a GPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

HEADER = Path(__file__).parent / "emulator" / "include" / "emu_fragments.hpp"

LANES = 32


def _split(lane: int) -> tuple[int, int]:
    return lane >> 2, lane % 4


def a_element(k: int, lane: int, reg: int, half: int) -> tuple[int, int]:
    """(row, col) in the m16 x k matrix A (k = 16 or 8) of ``half`` of register ``reg``."""
    g, t = _split(lane)
    if k == 16:
        return g + 8 * (reg % 2), 2 * t + half + 8 * (reg // 2)
    if k == 8:
        return g + 8 * reg, 2 * t + half
    raise ValueError(f"k must be 16 or 8, not {k}")


def b_element(k: int, lane: int, reg: int, half: int) -> tuple[int, int]:
    """(row, col) in the k x n8 matrix B of ``half`` of register ``reg``."""
    if k not in (16, 8):
        raise ValueError(f"k must be 16 or 8, not {k}")
    g, t = _split(lane)
    return 2 * t + half + 8 * reg, g


def c_element(lane: int, i: int) -> tuple[int, int]:
    """(row, col) in the m16 x n8 accumulator C or D of the lane's float ``i`` (0-3)."""
    g, t = _split(lane)
    return g + 8 * (i // 2), 2 * t + i % 2


def ldmatrix_element(lane: int, half: int, trans: bool) -> tuple[int, int]:
    """(row, col) in the 8x8 matrix, as stored, that ``half`` of each register of ``lane`` gets
    from ldmatrix. The row's address comes from lane ``8 * matrix + row``."""
    if trans:
        return 2 * (lane % 4) + half, lane // 4
    return lane // 4, 2 * (lane % 4) + half


def ldmatrix_address_lane(matrix: int, row: int) -> int:
    """The lane whose address ldmatrix reads for ``row`` of ``matrix``."""
    return 8 * matrix + row


def wmma_element(use: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) in the 16x16 tile of element ``x[i]`` (0-7) of a WMMA fragment on the emulator;
    ``use`` is "matrix_a", "matrix_b" or "accumulator". (CUDA's __half matrix_a/matrix_b
    fragments have 16 elements; the emulator's elements 8-15 repeat 0-7.)"""
    if use == "matrix_a":
        return a_element(16, lane, i // 2, i % 2)
    n8 = 8 * (i // 4)
    if use == "matrix_b":
        row, col = b_element(16, lane, (i % 4) // 2, i % 2)
    elif use == "accumulator":
        row, col = c_element(lane, i % 4)
    else:
        raise ValueError(f"unknown WMMA use {use!r}")
    return row, col + n8


# ----------------------------------------------------------------------------- the C++ header

def _table(name: str, comment: str, shape: tuple[int, ...], cell) -> str:
    """A constexpr array of {row, col} over the index space ``shape`` (lane first)."""
    def body(prefix: tuple[int, ...], depth: int) -> str:
        if depth == len(shape):
            row, col = cell(*prefix)
            return f"{{{row}, {col}}}"
        items = [body(prefix + (i,), depth + 1) for i in range(shape[depth])]
        sep = ",\n    " if depth == 0 else ", "
        return "{" + sep.join(items) + "}"

    dims = "".join(f"[{n}]" for n in shape)
    return f"// {comment}\ninline constexpr RowCol {name}{dims} = {{\n    " + body((), 0)[1:-1] + "};\n"


def header_text() -> str:
    tables = [
        _table("kA16", "mma m16n8k16, A (16 x 16): [lane][register][half]", (LANES, 4, 2),
               lambda lane, r, h: a_element(16, lane, r, h)),
        _table("kA8", "mma m16n8k8, A (16 x 8): [lane][register][half]", (LANES, 2, 2),
               lambda lane, r, h: a_element(8, lane, r, h)),
        _table("kB16", "mma m16n8k16, B (16 x 8): [lane][register][half]", (LANES, 2, 2),
               lambda lane, r, h: b_element(16, lane, r, h)),
        _table("kB8", "mma m16n8k8, B (8 x 8): [lane][register][half]", (LANES, 1, 2),
               lambda lane, r, h: b_element(8, lane, r, h)),
        _table("kC", "mma C and D (16 x 8, floats): [lane][element]", (LANES, 4), c_element),
        _table("kLdmatrix", "ldmatrix, one 8x8 matrix as stored: [trans][lane][half]", (2, LANES, 2),
               lambda trans, lane, h: ldmatrix_element(lane, h, bool(trans))),
        _table("kWmmaA", "WMMA matrix_a (16 x 16) on the emulator: [lane][element]", (LANES, 8),
               lambda lane, i: wmma_element("matrix_a", lane, i)),
        _table("kWmmaB", "WMMA matrix_b (16 x 16) on the emulator: [lane][element]", (LANES, 8),
               lambda lane, i: wmma_element("matrix_b", lane, i)),
        _table("kWmmaC", "WMMA accumulator (16 x 16) on the emulator: [lane][element]", (LANES, 8),
               lambda lane, i: wmma_element("accumulator", lane, i)),
    ]
    head = (
        "// emu_fragments.hpp: GENERATED by `python -m grader.fragments` from grader/fragments.py, which\n"
        "// explains the layouts (PTX ISA mma and ldmatrix fragments). Do not edit by hand.\n"
        "#pragma once\n\n"
        "namespace emu::frag {\n\n"
        "struct RowCol {\n    unsigned char row, col;\n};\n\n"
    )
    return head + "\n".join(tables) + "\n}  // namespace emu::frag\n"


def write_header(path: Path = HEADER) -> Path:
    path.write_text(header_text())
    return path


if __name__ == "__main__":
    print(write_header(Path(sys.argv[1]) if len(sys.argv) > 1 else HEADER))
