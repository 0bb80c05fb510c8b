"""The one pydantic -> ConfigError conversion (simulator.errors.validation_error)."""

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from simulator.errors import TYPE_TAGS, validation_error


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bw: str | float | None = None


class _Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    size: int = 1
    links: dict[str, _Inner] = {}

    @field_validator("size")
    @classmethod
    def _size(cls, v):
        if v > 10:
            raise ValueError("must be <= 10")
        return v


def _err(data):
    with pytest.raises(ValidationError) as info:
        _Outer.model_validate(data)
    return info.value


def test_listing_style_names_every_unknown_key_and_the_valid_ones():
    e = validation_error(_err({"name": "a", "x": 1, "y": 2}), source="f.yaml",
                         valid=_Outer.model_fields, style="got")
    assert str(e) == "f.yaml: x: unknown key(s) 'x', 'y'; valid: name, size, links"


def test_got_style_lowercases_the_message_and_shows_the_input():
    e = validation_error(_err({"name": "a", "size": "big"}), source="f.yaml", style="got")
    assert str(e) == ("f.yaml: size: input should be a valid integer, unable to parse "
                      "string as an integer, got 'big'")
    assert str(validation_error(_err({}), style="got")) == "name: missing required key"


def test_plain_style_drops_type_tags_cuts_depth_and_prefixes():
    e = validation_error(_err({"name": "a", "links": {"ib": {"bw": [1]}}}), prefix="strategy",
                         depth=2, skip=TYPE_TAGS)
    assert e.field == "strategy.links.ib" and e.reason == "Input should be a valid string"
    e = validation_error(_err({"name": "a", "size": 11}), prefix="strategy")
    assert str(e) == "strategy.size: must be <= 10"       # "Value error, " removed
    assert validation_error(_err({"name": "a", "q": 1})).reason == "unknown key"
    assert validation_error(_err({})).reason == "Field required"


def test_paren_style_adds_the_input_unless_the_message_has_it():
    assert str(validation_error(_err({"name": "a", "size": 11}), source="s", style="paren")) \
        == "s: size: must be <= 10 (got 11)"
    assert str(validation_error(_err({"name": "a", "q": 1}), style="paren")) \
        == "q: unknown key (got 1)"
    assert validation_error(_err({}), style="paren").reason == "missing required key"


class _Listed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[_Outer]


def test_brackets_write_list_positions_as_indices_and_raw_keeps_pydantic_s_message():
    exc = None
    try:
        _Listed.model_validate({"items": [{"name": "a"}, {"name": "b", "size": 11}]})
    except ValidationError as e:
        exc = e
    assert validation_error(exc, style="paren", brackets=True).field == "items[1].size"
    assert validation_error(exc).field == "items.1.size"           # dotted without brackets
    raw = validation_error(_err({"name": "a", "q": 1}), source="p.yaml", style="raw")
    assert str(raw) == "p.yaml: q: Extra inputs are not permitted"
