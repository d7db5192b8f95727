"""Messages as parts: text and the settings they refer to, composed by ``+``, said in the
library's words by ``str()`` and in the command line's by :meth:`Message.render`."""

from __future__ import annotations

import ast
import marshal
import pickle
from pathlib import Path

import pytest

from analysis.errors import (
    ConfigError,
    LogFormatError,
    Message,
    MissingFieldError,
    SettingRef,
    render,
    setting,
)


def _flag(name: str, value: str | None) -> str:
    return f"--{name.replace('_', '-')}" + ("" if value is None else f" {value}")


def test_a_message_composes_by_plus_and_keeps_its_parts() -> None:
    message = "bad record; pass " + setting("on_bad_record", "skip") + " or fix it"
    assert isinstance(message, Message)
    assert message == "bad record; pass on_bad_record=skip or fix it"
    assert message.parts == ("bad record; pass ", SettingRef("on_bad_record", "skip"), " or fix it")
    assert ("x: " + message).render(_flag) == "x: bad record; pass --on-bad-record skip or fix it"
    assert (setting("order_by") + ": " + message).settings == (
        SettingRef("order_by"),
        SettingRef("on_bad_record", "skip"),
    )
    assert render("plain text", _flag) == "plain text"


def test_a_setting_in_an_f_string_is_refused() -> None:
    with pytest.raises(TypeError, match="with \\+"):
        f"pass {setting('batch_groups', 'B')}"


def test_no_setting_is_named_inside_an_f_string_in_the_code() -> None:
    """Where no test reaches it, a setting in an f-string would still fail only when said."""
    root = Path(__file__).resolve().parents[2]
    found = [
        f"{path.relative_to(root)}:{node.lineno}"
        for folder in ("analysis", "cli")
        for path in sorted((root / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FormattedValue)
        and any(
            isinstance(call, ast.Call) and getattr(call.func, "id", None) == "setting"
            for call in ast.walk(node.value)
        )
    ]
    assert found == []


def test_an_error_says_its_settings_each_way() -> None:
    error = ConfigError("pass " + setting("batch_groups", "B"))
    assert str(error) == "pass batch_groups=B"
    assert error.render(_flag) == "pass --batch-groups B"
    assert error.settings == [("batch_groups", "B")]
    assert str(ConfigError("no settings")) == "no settings"
    assert ConfigError("no settings").settings == []


def test_advice_is_kept_apart_from_what_is_wrong() -> None:
    error = LogFormatError.advised("x.jsonl:2: bad", "; fix the record or pass " + setting("a", 1))
    assert str(error) == "x.jsonl:2: bad; fix the record or pass a=1"
    assert error.base == "x.jsonl:2: bad" and error.base.settings == ()
    plain = MissingFieldError("no field")
    assert plain.base is not None and plain.base == plain.message == "no field"


def test_messages_cross_a_process_boundary_as_parts() -> None:
    message = "past the limit; raise it with " + setting("max_record_bytes", 2048)
    sent = marshal.loads(marshal.dumps(message.plain()))
    assert Message.from_plain(sent).parts == message.parts
    error = LogFormatError.advised("bad", "; pass " + setting("on_bad_record", "skip"))
    back = pickle.loads(pickle.dumps(error))
    assert back.render(_flag) == "bad; pass --on-bad-record skip" and back.base == "bad"
