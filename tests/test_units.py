"""The one way each quantity is written (tuimon/model/units.py), at each unit's edge."""

import pytest

from tuimon.model import NA
from tuimon.model.units import GIB, KIB, MIB, gib, human_bytes, percent, share


@pytest.mark.parametrize("b, text", [(0, "0 B"), (1023, "1023 B"), (KIB, "1 KiB"), (MIB - 1, "1024 KiB"),
                                     (MIB, "1 MiB"), (300 * MIB, "300 MiB"), (GIB - MIB, "1023 MiB"),
                                     (GIB, "1.0 GiB"), (int(79.24 * GIB), "79.2 GiB"), (2048 * GIB, "2.0 TiB"),
                                     (None, "n/a"), (NA("no NVML"), "n/a")])
def test_a_size_in_the_largest_unit_it_fills(b, text):
    assert human_bytes(b) == text


def test_percentages_and_shares_are_whole_and_say_what_is_unknown():
    assert (percent(42.4), percent(5, 4), percent(None, 4), percent(NA("x"))) == ("42%", "  5%", " n/a", "n/a")
    assert (share(0.234), share(1.0), share(None)) == ("23%", "100%", "n/a")
    assert (gib(3 * GIB), gib(None)) == ("3.0", "n/a")
