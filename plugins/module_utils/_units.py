# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Every systemd unit the collection writes, rendered one way: a unit as typed sections, each value checked, the
command line quoted by systemd.service(5)'s rules ("Command lines") and systemd.syntax(7)'s ("Quoting").
Private to llmfleet.serving; pure functions, no I/O. tests/unit/plugins/module_utils/test_units.py renders every
unit kind the roles write and runs `systemd-analyze verify` on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence, Tuple, Union

# one setting: its key and its value (a number is written as it is)
Setting = Tuple[str, Union[str, int]]

KEY_RE = re.compile(r"[A-Z][A-Za-z0-9]*")
# Settings whose value systemd expands % specifiers in (systemd.unit(5) "Specifiers", systemd.exec(5)): a literal % is
# written %%. Any other setting the collection writes holds no % at all (refused: it would mean something else there).
SPECIFIER_KEYS = frozenset({"Description", "Documentation", "ConditionPathExists", "EnvironmentFile", "WorkingDirectory", "User",
                            "Group", "SyslogIdentifier"})
# Settings that name a file or folder: absolute, as systemd requires (ConditionPathExists may start with "!").
PATH_KEYS = frozenset({"ConditionPathExists", "EnvironmentFile", "WorkingDirectory"})
# A word of ExecStart that systemd would read as something else unquoted: blanks, quotes, backslashes, ';' (a separate
# word ';' once split commands). '%' and '$' are doubled instead (specifiers and variable expansion).
NEEDS_QUOTES = re.compile(r"[\s\"'\\;]")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnitError(ValueError):
    """A value a unit file cannot carry as given; the message names the setting and says what would work."""


@dataclass(frozen=True)
class Unit:
    """One unit file: comment lines at the top, then [Unit], [Service] (ExecStart first among the settings given after
    it in `service_after`) and [Install]. `exec_start` is the command as an argument vector, its first word an
    absolute path."""
    description: str
    exec_start: Sequence[str]
    comments: Sequence[str] = ()
    unit: Sequence[Setting] = ()              # [Unit] settings after Description=
    service: Sequence[Setting] = ()           # [Service] settings before ExecStart=
    service_after: Sequence[Setting] = ()     # [Service] settings after ExecStart=
    install: Sequence[Setting] = field(default_factory=lambda: (("WantedBy", "multi-user.target"),))


def exec_quote(arg: str) -> str:
    """One ExecStart word: systemd splits on blanks, reads C escapes inside double quotes, and expands `%` specifiers and
    `$` variables, which are doubled to stay literal. A control character (newline, tab ...) has no place in an argument."""
    text = str(arg)
    if CONTROL.search(text):
        raise UnitError(f"the command-line argument {text!r} holds a control character (newline, tab ...), which a unit's "
                        "ExecStart cannot carry: remove it from the value")
    text = text.replace("%", "%%").replace("$", "$$")
    if text and not NEEDS_QUOTES.search(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_line(argv: Sequence[str]) -> str:
    """ExecStart's value: the first word an absolute path (no prefix, no search of PATH), every word quoted."""
    words = [str(a) for a in argv]
    if not words or not words[0].startswith("/") or NEEDS_QUOTES.search(words[0]) or "%" in words[0] or "$" in words[0]:
        raise UnitError(f"ExecStart must start with an absolute path to the program without blanks, quotes, % or $, "
                        f"got {words[:1]!r}: give the full path (e.g. /usr/bin/python3)")
    return " ".join(exec_quote(w) for w in words)


def setting(key: str, value: Union[str, int]) -> str:
    """One `Key=value` line, the value checked: one line, no surrounding blanks, no trailing backslash (it would continue
    the line), % doubled where systemd expands specifiers and refused elsewhere, paths absolute."""
    if not KEY_RE.fullmatch(str(key)):
        raise UnitError(f"{key!r} is not a unit setting name: use CamelCase letters and digits (e.g. ExecStart)")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UnitError(f"{key}={value!r}: give a unit setting a string or a whole number")
    text = str(value)
    if CONTROL.search(text):
        raise UnitError(f"{key}={text!r} holds a newline or another control character, which a unit file cannot carry: "
                        "give a value on one line")
    if not text or text != text.strip() or text.endswith("\\"):
        raise UnitError(f"{key}={text!r}: a unit setting needs a value without leading or trailing blanks or backslash")
    if key in PATH_KEYS and not text.lstrip("!").startswith("/"):
        raise UnitError(f"{key}={text!r} must be an absolute path (systemd refuses a relative one): give the full path")
    if "%" in text:
        if key not in SPECIFIER_KEYS:
            raise UnitError(f"{key}={text!r}: '%' has no literal meaning in this setting; remove it")
        text = text.replace("%", "%%")
    return f"{key}={text}"


def render(unit: Unit) -> str:
    """The unit file's text: comments, [Unit], [Service], [Install], one blank line between sections, a final newline."""
    for comment in unit.comments:
        if CONTROL.search(str(comment)):
            raise UnitError(f"unit comment {comment!r} holds a newline or another control character: give one line each")
    lines = [f"# {c}" for c in unit.comments]
    lines += ["[Unit]", setting("Description", unit.description), *(setting(k, v) for k, v in unit.unit), ""]
    lines += ["[Service]", *(setting(k, v) for k, v in unit.service), f"ExecStart={exec_line(unit.exec_start)}",
              *(setting(k, v) for k, v in unit.service_after), ""]
    lines += ["[Install]", *(setting(k, v) for k, v in unit.install), ""]
    return "\n".join(lines)


__all__ = ["Setting", "Unit", "UnitError", "exec_quote", "exec_line", "setting", "render"]
