import pytest

from trainguard.api import ExitCodeSet


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("129,101", [129, 101], [100, 130]),
        ("1-3,137", [1, 2, 3, 137], [0, 4, 136]),
        (137, [137], [136]),
        ([1, "5-6"], [1, 5, 6], [2, 7]),
    ],
)
def test_parse_and_match(text: object, inside: list[int], outside: list[int]) -> None:
    codes = ExitCodeSet.parse(text)
    assert all(code in codes for code in inside)
    assert not any(code in codes for code in outside)


def test_keeps_written_order() -> None:
    assert str(ExitCodeSet.parse("129,101")) == "129,101"


@pytest.mark.parametrize("bad", ["1-x", "", "5-1", "-3", True, 3.5, "1,,2"])
def test_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        ExitCodeSet.parse(bad)
