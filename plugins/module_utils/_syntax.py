# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What an inventory string may hold where the collection writes it: one check per target syntax (an nginx
configuration word, a systemd unit's value, an environment file's value) and the served model name's rule, which must
pass all of them. Private to llmfleet.serving; pure functions, no I/O.

Each check returns None for a value the target carries as it is (or after the renderer's own quoting), else what is
wrong with it in words; the caller names the inventory key. The planner runs them on everything an inventory gives
(_plan.inputs), so a value that would change what a file means is refused at plan time, before any host is touched.
"""

from __future__ import annotations

import re
from typing import Any, Optional

# Control characters (newline, carriage return, tab, NUL ...): no target here carries them inside one value.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# What nginx reads as syntax inside a configuration word (nginx's own parser, src/core/ngx_conf_file.c
# ngx_conf_read_token at release-1.22.1): blanks and newlines separate words, ';' ends a directive, '{' and '}' open and
# close a block, '#' after a blank starts a comment, a quote after a blank starts a quoted word, a backslash escapes the next
# character, and '$' starts a variable in the many directives whose values are scripts (ngx_http_script.c). A value with
# none of these is one word nginx reads back unchanged, wherever the template puts it.
NGINX_SYNTAX = re.compile(r"[\s;{}#\"'\\$]")
# The model name clients ask for (vLLM's --served-model-name, the gateway's route and /v1/models id): letters and digits,
# then also '.', '_', '-' (hub ids), '/' (owner/name), ':' (name:tag), '@' and '+' (revision or variant), at most 128.
# None of them means anything to nginx, systemd, an environment file or JSON.
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}")
# How the gateway picks an instance of a served name (a deployment's `routing`): the planner checks it, the plan carries it,
# the gateway renders it; the one word is what nginx's upstream and gateway.js read.
ROUTING = ("least_conn", "session", "prefix")
SERVED_NAME_RULE = ("a letter or digit, then up to 127 letters, digits and . _ - / : @ + (no blanks, quotes, ';', '{', '}', "
                    "'$', '#' or control characters)")


def _printable(value: Any) -> Optional[str]:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return f"a {type(value).__name__}, where a string is needed"
    if CONTROL.search(str(value)):
        return "a newline or another control character"
    return None


def nginx_word(value: Any) -> Optional[str]:
    """Why `value` cannot be one word of an nginx configuration file (a directive's argument or a comment's text), or
    None. Nothing in the gateway's templates quotes an inventory value: it must need no quoting."""
    problem = _printable(value)
    if problem:
        return problem
    text = str(value)
    if not text:
        return "empty"
    found = NGINX_SYNTAX.search(text)
    if found:
        return f"{found.group(0)!r}, which nginx reads as syntax (blank, ';', '{{', '}}', '#', a quote, '\\' or '$')"
    return None


def unit_value(value: Any) -> Optional[str]:
    """Why `value` cannot be one value of a systemd unit (an ExecStart word or a setting), or None. _units quotes blanks,
    quotes and backslashes and doubles '%' and '$' (systemd.service(5) "Command lines", systemd.syntax(7) "Quoting");
    a control character has no quoting: a newline would start a new setting (another ExecStartPre=, User=root ...)."""
    return _printable(value)


def env_value(value: Any) -> Optional[str]:
    """Why `value` cannot be one variable's value in an EnvironmentFile (_serving.env_file writes KEY="value" with '"',
    '\\' and '$' escaped) or a container's environment, or None: a newline would start a new variable, a NUL ends it."""
    return _printable(value)


def served_name(value: Any) -> Optional[str]:
    """Why `value` cannot be a served model name (SERVED_NAME), or None."""
    if not isinstance(value, str) or not SERVED_NAME.fullmatch(value):
        return f"not a served model name: use {SERVED_NAME_RULE}"
    return None


__all__ = ["CONTROL", "NGINX_SYNTAX", "SERVED_NAME", "SERVED_NAME_RULE", "nginx_word", "unit_value", "env_value", "served_name"]
