"""How the deploy checks and suggestions spell Slurm values in their sentences: walltimes
(``2:00:00``), memory sizes (``16G``) and lists of names. Part of :mod:`recipes.deploy.checks`."""

from __future__ import annotations

from collections.abc import Sequence


def format_minutes(minutes: int) -> str:
    """Slurm's walltime spelling: ``30:00``... ``2:00:00``, ``1-00:00:00``."""
    days, rest = divmod(int(minutes), 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:00"
    return f"{hours}:{mins:02d}:00"


def format_mb(mb: int) -> str:
    if mb >= 1024 and mb % 1024 == 0:
        return f"{mb // 1024}G"
    if mb >= 10 * 1024:
        return f"{mb / 1024:.1f}G"
    return f"{mb}M"


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"
