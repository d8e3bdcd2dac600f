"""The ``requires_hermes`` ranges a manifest may declare (`hermesd.plugins.api_version`)."""

from __future__ import annotations

import pytest

from hermesd.plugins.api_version import refusal, satisfies


@pytest.mark.parametrize(
    "spec, fits",
    [
        (">=0.19", True),
        ("0.19", True),  # a bare version means >=
        ("0.19.0", True),
        (">=0.19,<0.20", True),
        (">= 0.18.2 , != 0.19.1", True),
        ("==0.19.0", True),
        ("v0.19", True),
        (">=0.20.0rc1", False),  # the suffix is dropped: 0.20.0
        ("<0.19", False),
        (">0.19.0", False),
        (">=0.19,<0.19", False),
        ("!=0.19", False),
    ],
)
def test_a_range_is_met_when_every_clause_holds_for_0_19_0(spec: str, fits: bool) -> None:
    assert satisfies(spec) is fits


def test_a_range_that_cannot_be_read_is_refused_saying_so() -> None:
    assert refusal("~> banana") == (
        "requires_hermes '~> banana' cannot be read ('~> banana' is not a comparator and a "
        "version); hermesd implements hermes-agent 0.19.0"
    )


def test_no_range_and_a_fitting_range_load() -> None:
    assert refusal(None) is None and refusal("") is None and refusal(">=0.19") is None
