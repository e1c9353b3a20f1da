# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Private to llmfleet.serving (controller side): how every filter of the collection calls its pure function in
module_utils. The module's own error says what is wrong with the inventory or the plan, so it becomes the filter's error
as it is; a KeyError or TypeError from inside means the input was not the shape the filter documents (a hand-edited
plan, a caller's bug), and the message names the function and what it met."""

from __future__ import annotations

from typing import Any, Callable, Tuple, Type

from ansible.errors import AnsibleFilterError

MALFORMED: Tuple[Type[Exception], ...] = (KeyError, TypeError, AttributeError)


def call(func: Callable[..., Any], errors: Tuple[Type[Exception], ...], *args: Any,
         malformed: Tuple[Type[Exception], ...] = MALFORMED, **kwargs: Any) -> Any:
    """func(*args, **kwargs); one of `errors` (the module's own) becomes an AnsibleFilterError with its message, one of
    `malformed` an AnsibleFilterError naming func and the exception."""
    try:
        return func(*args, **kwargs)
    except errors as exc:
        raise AnsibleFilterError(str(exc)) from exc
    except malformed as exc:
        raise AnsibleFilterError(f"{func.__name__}: malformed input ({type(exc).__name__}: {exc})") from exc
