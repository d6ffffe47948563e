"""The run option rules of ``domain.run_options``: what the platform refuses, and ours."""

from __future__ import annotations

import pytest

from orchestrator.domain.errors import InvalidRunOption, OptionAboveCap
from orchestrator.domain.run_options import (
    MEMORY_MB_CHOICES,
    OptionCaps,
    RunOptions,
    check_run_options,
    option_violations,
)


def test_memory_choices_are_the_powers_of_two_the_platform_accepts() -> None:
    assert MEMORY_MB_CHOICES == (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


@pytest.mark.parametrize(
    ("options", "name"),
    [
        (RunOptions(memory_mb=1000), "memoryMb"),  # the example: not a power of 2
        (RunOptions(memory_mb=64), "memoryMb"),  # a power of 2 below the minimum
        (RunOptions(memory_mb=65536), "memoryMb"),  # above the maximum
        (RunOptions(memory_mb=0), "memoryMb"),
        (RunOptions(timeout_sec=0), "timeoutSec"),  # "no timeout" on the platform; not here
        (RunOptions(timeout_sec=-5), "timeoutSec"),
        (RunOptions(timeout_sec=7 * 24 * 3600 + 1), "timeoutSec"),
        (RunOptions(max_items=0), "maxItems"),
        (RunOptions(build="b" * 65), "build"),
        (RunOptions(max_total_charge_usd=0), "maxTotalChargeUsd"),  # the platform refuses 0
        (RunOptions(max_total_charge_usd=-1.5), "maxTotalChargeUsd"),
    ],
)
def test_each_rule_names_its_option(options: RunOptions, name: str) -> None:
    assert [n for n, _ in option_violations(options)] == [name]
    with pytest.raises(InvalidRunOption) as caught:
        check_run_options(options, pointer="/runs/3/options")
    assert caught.value.field == f"/runs/3/options/{name}"
    assert caught.value.code == "validation-failed"


@pytest.mark.parametrize(
    "options",
    [
        RunOptions(),
        RunOptions(memory_mb=128, timeout_sec=1, max_items=1, build="latest"),
        RunOptions(memory_mb=32768, timeout_sec=7 * 24 * 3600, build="b" * 64),
    ],
)
def test_the_bounds_themselves_are_accepted(options: RunOptions) -> None:
    assert option_violations(options) == []
    check_run_options(options, pointer="/x")


def test_defaults_fill_only_what_is_unset_and_say_where_a_refusal_came_from() -> None:
    merged = RunOptions(timeout_sec=60).over(RunOptions(memory_mb=1000, timeout_sec=600))
    assert merged == RunOptions(memory_mb=1000, timeout_sec=60)
    assert merged.stored() == {"memoryMb": 1000, "timeoutSec": 60}
    with pytest.raises(InvalidRunOption) as caught:
        check_run_options(merged, pointer="/runs/0/options", source="a registry default")
    assert caught.value.field == "/runs/0/options/memoryMb"
    assert caught.value.detail.endswith("(a registry default)")


def test_hard_caps_fill_unset_options_and_refuse_larger_ones() -> None:
    caps = OptionCaps(max_items=1000, max_total_charge_usd=5.0)
    filled = caps.apply(RunOptions(memory_mb=512), pointer="/runs/2/options", actor="a")
    assert filled == RunOptions(memory_mb=512, max_items=1000, max_total_charge_usd=5.0)
    within = RunOptions(max_items=1000, max_total_charge_usd=0.5)
    assert caps.apply(within, pointer="/x", actor="a") == within
    for options, name in (
        (RunOptions(max_items=1001), "maxItems"),
        (RunOptions(max_total_charge_usd=5.01), "maxTotalChargeUsd"),
    ):
        with pytest.raises(OptionAboveCap) as caught:
            caps.apply(options, pointer="/runs/2/options", actor="ultron-leadgen")
        assert caught.value.field == f"/runs/2/options/{name}"
        assert caught.value.code == "validation-failed"
        assert "hard cap" in str(caught.value) and "ultron-leadgen" in str(caught.value)
    assert OptionCaps().apply(RunOptions(), pointer="/x", actor="a") == RunOptions()
