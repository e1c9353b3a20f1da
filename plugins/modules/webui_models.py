#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: webui_models
short_description: Wait for Open WebUI, prove its admin, and set each served model's chat settings from the plans
version_added: 0.1.0
description:
  - Waits until Open WebUI answers C(/ready) with 200 on loopback (the first start migrates its database), without
    printing a retry line per probe; stops waiting as soon as its systemd unit is no longer running.
  - Signs in as the admin (proves the admin exists with the inventory's password).
  - "For every model in O(models) (the C(webui_model_settings) filter's output: one entry per served model of the
    fleet's plans) makes Open WebUI's own model row say how to chat with it, through Open WebUI's API
    C(/api/v1/models/create) and C(/api/v1/models/model/update) (a changed grant through
    C(/api/v1/models/model/access/update)): native function calling where every instance has a
    tool parser, C(legacy) (no C(tools) in the request, which vLLM would refuse) elsewhere; with O(access=public), a
    read grant for every signed-in user. Fields an admin set (name, description, system prompt, other grants,
    active or not) are kept; the row Open WebUI answers with is checked."
  - Changes only rows that differ; a second run reports no change.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  url:
    description: Open WebUI's loopback URL, for example C(http://127.0.0.1:3080).
    type: str
    required: true
  unit:
    description: Its systemd unit (without C(.service)); the wait stops when the unit is no longer active.
    type: str
    required: true
  email:
    description: The admin's e-mail.
    type: str
    required: true
  password:
    description: The admin's password.
    type: str
    required: true
  models:
    description: The per-model settings (C(webui_model_settings) filter); empty sets none.
    type: list
    elements: dict
    default: []
  access:
    description: C(public) gives every signed-in user read access to the fleet's models; C(admins) leaves them to admins.
    type: str
    choices: [public, admins]
    default: public
  timeout:
    description: Seconds to wait for C(/ready).
    type: int
    default: 300
  interval:
    description: Seconds between probes.
    type: float
    default: 2
attributes:
  check_mode:
    support: full
    description: In check mode the rows that would change are reported, none is written; a service that is not running
      is not waited for.
  diff_mode:
    support: full
    description: The managed fields of each changed row, before and after (no secret is in them).
  idempotent:
    support: full
    description: Rows already as planned are left alone.
notes:
  - Runs on the web UI host; needs C(systemctl) there.
"""

EXAMPLES = r"""
- name: Open WebUI's per-model settings
  llmfleet.serving.webui_models:
    url: http://127.0.0.1:3080
    unit: llmfleet-open-webui
    email: "{{ webui_admin_email }}"
    password: "{{ webui_admin_password }}"
    models: "{{ plans | llmfleet.serving.webui_model_settings }}"
"""

RETURN = r"""
ready_s:
  description: Seconds this task waited for C(/ready).
  returned: always
  type: float
stage:
  description: Where it failed, C(ready), C(admin) or C(models) (on failure).
  returned: failure
  type: str
models:
  description: Each planned model with its function calling and why.
  returned: success
  type: list
  elements: dict
changes:
  description: Each row created or updated, C({id, action, before, after}).
  returned: success
  type: list
  elements: dict
log_tail:
  description: The unit's last log lines (when it did not become ready).
  returned: failure
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._openai_http import call, error_text
from ansible_collections.llmfleet.serving.plugins.module_utils._webui import WebUIError, model_changes, row_as_planned


def _active(module, unit):
    rc, out, _err = module.run_command(["systemctl", "is-active", unit + ".service"])
    return rc == 0 or out.strip() in ("activating", "reloading")


def _journal(module, unit):
    _rc, out, _err = module.run_command(["journalctl", "-u", unit, "-n", "25", "--no-pager", "-o", "cat"])
    return out.splitlines()


def wait_ready(module, url, unit, timeout, interval):
    """(ready, status of the last probe, seconds waited)."""
    t0 = time.monotonic()
    status = None
    while True:
        status, _body = call(url + "/ready", timeout=5)
        if status == 200:
            return True, status, time.monotonic() - t0
        if time.monotonic() - t0 > timeout or not _active(module, unit):
            return False, status, time.monotonic() - t0
        time.sleep(interval)


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            "email": {"type": "str", "required": True},
            "password": {"type": "str", "required": True, "no_log": True},
            "models": {"type": "list", "elements": "dict", "default": []},
            "access": {"type": "str", "choices": ["public", "admins"], "default": "public"},
            "timeout": {"type": "int", "default": 300},
            "interval": {"type": "float", "default": 2},
        },
        supports_check_mode=True,
    )
    p = module.params
    url, unit = p["url"].rstrip("/"), p["unit"]
    if module.check_mode and not _active(module, unit):
        module.exit_json(changed=bool(p["models"]), ready_s=0.0, models=p["models"], changes=[],
                         msg=f"{unit} is not running yet (check mode): its model settings would be made once it is")
    ready, status, waited = wait_ready(module, url, unit, p["timeout"], p["interval"])
    if not ready:
        why = "its unit stopped" if not _active(module, unit) else f"waited {p['timeout']} s"
        module.fail_json(msg=f"{url}/ready did not answer 200 ({why}; last: {status})", stage="ready", ready_s=round(waited, 1),
                         log_tail=_journal(module, unit))
    status, signed = call(url + "/api/v1/auths/signin", {"email": p["email"], "password": p["password"]}, timeout=30)
    if status != 200 or not isinstance(signed, dict) or signed.get("role") != "admin" or not signed.get("token"):
        hint = ": Open WebUI rate-limits sign-ins, wait three minutes and run again" if status == 429 else ""
        module.fail_json(msg=f"{p['email']} cannot sign in as admin (HTTP {status}{hint})", stage="admin", ready_s=round(waited, 1))
    token = signed["token"]
    status, rows = call(url + "/api/v1/models/all", api_key=token, timeout=30)
    if status != 200 or not isinstance(rows, list):
        module.fail_json(msg=f"GET /api/v1/models/all answered {status}: {error_text(rows)}", stage="models", ready_s=round(waited, 1))
    try:
        changes = model_changes(p["models"], rows, p["access"])
    except (WebUIError, KeyError, TypeError) as exc:
        module.fail_json(msg=f"the per-model settings are malformed: {exc}", stage="models", ready_s=round(waited, 1))
    if not module.check_mode:
        for change in changes:
            path = "/api/v1/models/create" if change["action"] == "create" else "/api/v1/models/model/update"
            status, answer = call(url + path, change["form"], api_key=token, timeout=30)
            if status == 200 and change["grants"]:
                # /model/update leaves an existing row's grants as they are: they have their own endpoint
                status, answer = call(url + "/api/v1/models/model/access/update",
                                      {k: change["form"][k] for k in ("id", "name", "access_grants")}, api_key=token, timeout=30)
            if status != 200:
                module.fail_json(msg=f"{change['action']} of model {change['id']} in Open WebUI answered {status}: {error_text(answer)}",
                                 stage="models", ready_s=round(waited, 1))
            if not row_as_planned(change, answer):
                module.fail_json(msg=f"{change['action']} of model {change['id']} in Open WebUI answered 200 but the row it stored "
                                     f"is not the planned one (wanted {change['after']}, stored {error_text(answer)})",
                                 stage="models", ready_s=round(waited, 1))
    report = [{k: c[k] for k in ("id", "action", "before", "after")} for c in changes]
    module.exit_json(changed=bool(changes), ready_s=round(waited, 1), models=p["models"], changes=report,
                     diff={"before": {c["id"]: c["before"] for c in changes}, "after": {c["id"]: c["after"] for c in changes}})


if __name__ == "__main__":
    main()
