import pytest

import rlxpy as rx


def test_defaults():
    assert rx.Config.from_env({}) == rx.Config(fast_conv=True, winograd=False, direct_conv=False)


@pytest.mark.parametrize("value, expected", [("1", True), ("on", True), ("TRUE", True), ("yes", True),
                                             ("0", False), ("off", False), ("False", False), ("no", False)])
def test_accepted_values(value, expected):
    c = rx.Config.from_env({"RLX_WINOGRAD": value, "RLX_DIRECT_CONV": value, "RLX_FAST_CONV": value})
    assert (c.winograd, c.direct_conv, c.fast_conv) == (expected,) * 3


@pytest.mark.parametrize("flag", ["RLX_FAST_CONV", "RLX_WINOGRAD", "RLX_DIRECT_CONV"])
def test_unknown_value_names_the_flag(flag):
    with pytest.raises(ValueError, match=f"{flag}='maybe'.*accepted"):
        rx.Config.from_env({flag: "maybe"})


def test_num_threads_flag():
    assert rx.Config.from_env({"RLX_NUM_THREADS": "2"}).num_threads == 2
    with pytest.raises(ValueError, match="RLX_NUM_THREADS"):
        rx.Config.from_env({"RLX_NUM_THREADS": "0"})


def test_compile_reads_the_environment(monkeypatch):
    g = rx.Graph()
    g.output("y", g.pool(g.input("x", (1, 1, 2, 2)), "max", 2))
    monkeypatch.setenv("RLX_FAST_CONV", "off")
    assert rx.compile(g).config.fast_conv is False
    monkeypatch.setenv("RLX_FAST_CONV", "bogus")
    with pytest.raises(ValueError, match="RLX_FAST_CONV"):
        rx.compile(g)
