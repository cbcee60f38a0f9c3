"""Model spec strings: the three head forms, layers, the optional ff, and clear errors for bad specs."""

from __future__ import annotations

import pytest

from microgpt.core.errors import ConfigError
from microgpt.model.specs import format_spec, parse_spec, parse_spec_list


@pytest.mark.parametrize("text, head_dims, n_layers", [
    ("d64n2", (64,), 2),
    ("d4x16n2", (16, 16, 16, 16), 2),
    ("d1+2+4+8+16+32n2", (1, 2, 4, 8, 16, 32), 2),
    ("d1x8n12", (8,), 12),
])
def test_head_forms(text, head_dims, n_layers):
    spec = parse_spec(text)
    assert (spec.head_dims, spec.n_layers, spec.d_ff) == (head_dims, n_layers, None)
    assert spec.d_model == sum(head_dims)


def test_d_ff_is_the_specs_else_the_given_default_else_four_times_d_model():
    assert parse_spec("d1+2+4+8+16+32n2").settings()["d_ff"] == 4 * 63
    assert parse_spec("d4x16n2").settings(d_ff=100)["d_ff"] == 100
    assert parse_spec("d4x16n2ff128").settings(d_ff=100) == {"heads": (16,) * 4, "n_layers": 2, "d_ff": 128}


def test_a_spec_builds_its_config_through_the_settings():
    from microgpt.settings.sources import Settings

    config = Settings(parse_spec("d64n2").settings()).model_config(65)  # one head of 64, not 64 heads
    assert (config.head_dims, config.d_model, config.n_layers, config.d_ff, config.vocab_size) == ((64,), 64, 2, 256, 65)


@pytest.mark.parametrize("text", ["", "64n2", "d64", "dn2", "d4x16x2n2", "d64n2ff", "d+4n2", "d4+n2", "d64n2 x",
                                  "D64N2", "d4.5n2", "d64l2"])
def test_invalid_specs_name_the_spec_and_show_the_grammar(text):
    with pytest.raises(ConfigError) as error:
        parse_spec(text)
    assert repr(text) in str(error.value) and "d<count>x<width>" in str(error.value)


@pytest.mark.parametrize("text", ["d0n2", "d0x16n2", "d4x0n2", "d4+0n2", "d64n0", "d64n2ff0"])
def test_zero_sizes_are_rejected(text):
    with pytest.raises(ConfigError, match="at least 1"):
        parse_spec(text)


def test_spec_lists():
    assert [s.text for s in parse_spec_list(" d64n2, d4x16n2 ")] == ["d64n2", "d4x16n2"]
    with pytest.raises(ConfigError, match="empty entry"):
        parse_spec_list("d64n2,,d4x16n2")
    with pytest.raises(ConfigError, match="d64n2 twice"):
        parse_spec_list("d64n2,d4x16n2,d64n2")
    with pytest.raises(ConfigError, match="'bad'"):
        parse_spec_list("d64n2,bad")


@pytest.mark.parametrize("head_dims, n_layers, d_ff, text", [
    ((64,), 2, 256, "d64n2"),
    ((16,) * 4, 2, 256, "d4x16n2"),
    ((1, 2, 4, 8, 16, 32), 3, 252, "d1+2+4+8+16+32n3"),
    ((16,) * 4, 2, 128, "d4x16n2ff128"),
])
def test_format_spec_writes_the_shortest_spec_and_reads_back(head_dims, n_layers, d_ff, text):
    assert format_spec(head_dims, n_layers, d_ff) == text
    spec = parse_spec(text)
    assert (spec.head_dims, spec.n_layers, spec.settings()["d_ff"]) == (head_dims, n_layers, d_ff)
