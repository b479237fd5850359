"""One measured figure of `make bench`, as bench/results/latest.md shows it: the runner's own and those
bench/fairness.py measures."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Figure:
    id: str
    measure: str
    value: float
    shown: str
    goal: str
    passed: bool
    detail: str = ""
