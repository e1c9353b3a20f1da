# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters for the web UI: webui_service (what the webui role writes), webui_errors (what is
wrong with its inputs, no secrets), webui_front (the gateway's server in front of it) and
webui_model_settings (each served model's chat settings from the plans); docs in the sidecar YAML files."""

from __future__ import annotations


from ansible_collections.llmfleet.serving.plugins.module_utils import _serving
from ansible_collections.llmfleet.serving.plugins.module_utils import _webui as w
from ansible_collections.llmfleet.serving.plugins.plugin_utils.filter_errors import call


def _call(func, *args, **kwargs):
    return call(func, (w.WebUIError, _serving.ServingError), *args, malformed=(KeyError, TypeError), **kwargs)


def webui_service(options, gateway_api_keys):
    return _call(w.service, dict(options or {}), gateway_api_keys)


def webui_errors(options, gateway_api_keys):
    return w.errors(dict(options or {}), gateway_api_keys)


def webui_front(listen, port):
    return _call(w.front, list(listen or []), port)


def webui_model_settings(plans):
    return _call(w.model_settings, dict(plans or {}))


class FilterModule:
    def filters(self):
        return {"webui_service": webui_service, "webui_errors": webui_errors, "webui_front": webui_front,
                "webui_model_settings": webui_model_settings}
