"""bench/instructions.py reads callgrind's dumps by their event names: instructions alone, or
with the cache and branch simulation's misses. Functional only: no valgrind here."""

from __future__ import annotations

import pytest
from bench_modules import shipped_dialects_only

with shipped_dialects_only():
    import instructions

PLAIN = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 0\ntotals: 884100\n"
SIMULATED = ("events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim\n"
             "totals: 282919434 81761962 47257402 7961951 5056181 1746952 536313 524339 285320 "
             "39855187 4591769 8400509 3507486\n")


def test_a_dump_s_totals_are_read_by_their_event_names() -> None:
    assert instructions._totals(PLAIN) == {"Ir": 884100}
    totals = instructions._totals(SIMULATED)
    assert totals["Ir"] == 282919434
    assert (totals["ILmr"], totals["DLmr"], totals["DLmw"]) == (536313, 524339, 285320)
    assert (totals["Bcm"], totals["Bim"]) == (4591769, 3507486)


def test_a_dump_without_totals_is_an_error_not_a_zero() -> None:
    with pytest.raises(RuntimeError, match="totals"):
        instructions._totals("events: Ir\n")
