# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Lookup fleet_var: a collection-wide variable's value, or the collection's one default for it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_var
short_description: A collection-wide variable, or the collection's default for it
version_added: 0.1.0
author: llmfleet.serving developers (!UNKNOWN)
description:
  - >-
    For each name: the variable's value on this host when the inventory (or a play) sets it, else the default the
    collection defines for it, once, in C(plugins/module_utils/_fleet_vars.py) (docs/inventory.md lists them).
  - >-
    Role defaults and playbooks use it instead of repeating a default expression, e.g. the plan folder
    C(llmfleet_plan_dir) (default C(<the folder ansible-playbook runs in>/plans)) or the secrets folder
    C(llmfleet_secrets_dir) (default C(<inventory>/.secrets)).
  - >-
    The vllm role's engine defaults are known by their role variable names (C(vllm_state_dir), C(vllm_user) ...),
    for roles that follow the vllm role's settings.
  - A name the collection does not define fails, listing the known ones.
options:
  _terms:
    description: Variable names, e.g. C(llmfleet_plan_dir).
    type: list
    elements: str
    required: true
  host:
    description: Read the variable of this inventory host instead of the current one (its hostvars).
    type: str
"""

EXAMPLES = r"""
- name: The plan folder
  ansible.builtin.debug:
    msg: "{{ lookup('llmfleet.serving.fleet_var', 'llmfleet_plan_dir') }}"

- name: Another host's setting, with the same default
  ansible.builtin.debug:
    msg: "{{ lookup('llmfleet.serving.fleet_var', 'llmfleet_gateway', host=groups['llm_gateway'][0]) }}"
"""

RETURN = r"""
_raw:
  description: One value per name (a path, a number, a flag ...).
  type: list
  elements: raw
"""

import os  # noqa: E402

from ansible.errors import AnsibleLookupError  # noqa: E402
from ansible.plugins.lookup import LookupBase  # noqa: E402

from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_vars import FleetVarError, value_of  # noqa: E402


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables or {}
        host = kwargs.get("host")
        if host:
            if host not in (variables.get("hostvars") or {}):
                raise AnsibleLookupError(f"fleet_var: host={host!r} is not in the inventory; name an inventory host")
            variables = variables["hostvars"][host]

        def read(name):
            if name not in variables:
                return False, None
            return True, self._templar.template(variables[name])

        out = []
        for term in terms:
            try:
                out.append(value_of(str(term), read, os.environ))
            except FleetVarError as exc:
                raise AnsibleLookupError(f"fleet_var: {exc}") from exc
        return out
