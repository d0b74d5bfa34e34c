"""The course's figure style, shared by every modules/NN_name/make_figures.py.

One palette, one resolution, and a saver that writes PNGs without the "Software" metadata, so
the bytes depend only on what is drawn and a re-run leaves git clean. Importing this module
selects matplotlib's Agg backend, so import it before matplotlib.pyplot. The scripts run as
plain files, so each puts modules/ on sys.path first:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from figstyle import BLUE, saver  # noqa: E402
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 110

BLUE = "#4C72B0"
ORANGE = "#DD8452"
GREEN = "#55A868"
RED = "#C44E52"
PURPLE = "#8172B3"
GREY = "#D9D9D9"
LIGHT = "#DCE6F4"  # pale blue fill


def ceil_div(n: int, b: int) -> int:
    return -(-n // b)


def despine(*axes) -> None:
    """Hide the top and right frame lines of each axes."""
    for ax in axes:
        for s in ("top", "right"):
            ax.spines[s].set_visible(False)


def saver(img: Path) -> Callable[..., None]:
    """save(fig, name, tight=False): write fig to img/name at DPI and close it. tight=True
    crops to the drawn content (bbox_inches="tight", pad 0.08 in)."""

    def save(fig, name: str, tight: bool = False) -> None:
        img.mkdir(parents=True, exist_ok=True)
        extra = dict(bbox_inches="tight", pad_inches=0.08) if tight else {}
        # No "Software" metadata: the PNG bytes then depend only on what is drawn.
        fig.savefig(img / name, dpi=DPI, metadata={"Software": None}, **extra)
        plt.close(fig)

    return save
