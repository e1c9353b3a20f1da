# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Action config_tree: render the task's templates on the controller (the template lookup: the role's
templates/ folder, every variable of the task, ansible_managed) and hand the whole tree to the config_tree
module in one call. Secret files go in its no_log list, so their content is in no output and no diff."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import lookup_loader


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        templates = list(args.pop("templates", None) or [])
        files, private_files = list(args.pop("files", None) or []), list(args.pop("private_files", None) or [])
        lookup = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)
        for entry in templates:
            missing = [key for key in ("src", "dest", "mode") if key not in entry]
            if missing:
                raise AnsibleActionFail(f"config_tree: the template entry {entry!r} lacks {', '.join(missing)}")
            content = lookup.run([entry["src"]], variables=task_vars)[0]
            item = {"path": entry["dest"], "content": str(content), "mode": str(entry["mode"])}
            (private_files if entry.get("secret") else files).append(item)
        args.update(files=files, private_files=private_files)
        result.update(self._execute_module(module_name="llmfleet.serving.config_tree", module_args=args,
                                           task_vars=task_vars))
        return result
