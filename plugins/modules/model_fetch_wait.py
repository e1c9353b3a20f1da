#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# The work happens in the action plugin of the same name (plugins/action/model_fetch_wait.py); this file documents it.

from __future__ import annotations

DOCUMENTATION = r"""
module: model_fetch_wait
short_description: Wait for model_fetch jobs (async, poll 0) and print their progress
version_added: 0.1.0
description:
  - Polls each job with C(async_status) and measures the bytes under its folder (C(du -sb)); prints one line per
    running job every O(interval) seconds - percent of what this run fetches, rate, time left - and returns each
    job's final result in O(jobs) order.
  - Fails with the jobs' own messages when any of them failed, and when O(timeout) passes first.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  jobs:
    description:
      - One entry per started job - C(jid), C(label), C(dest), C(needed) (bytes this run fetches) and C(start_bytes)
        (bytes under C(dest) before it started).
    type: list
    elements: dict
    required: true
  interval:
    description: Seconds between progress lines.
    type: int
    default: 15
  timeout:
    description: Longest wait, in seconds.
    type: int
    default: 21600
attributes:
  check_mode:
    description: Nothing to wait for in check mode; the role does not call it then.
    support: none
  diff_mode:
    description: Not supported.
    support: none
  action:
    description: Runs on the controller; polls the host.
    support: full
  async:
    description: It is the waiting side of async jobs.
    support: none
"""

EXAMPLES = r"""
- name: Start the download
  llmfleet.serving.model_fetch:
    model_id: Qwen/Qwen3-0.6B
    revision: v1.0
    dest: /models/Qwen3-0.6B@v1.0
  async: 21600
  poll: 0
  register: job

- name: Follow it
  llmfleet.serving.model_fetch_wait:
    jobs:
      - {jid: "{{ job.ansible_job_id }}", label: Qwen3-0.6B, dest: /models/Qwen3-0.6B@v1.0, needed: 1503238553, start_bytes: 0}
    interval: 15
"""

RETURN = r"""
results:
  description: Each job's own final result (model_fetch's return values), in the order of O(jobs).
  returned: always
  type: list
  elements: dict
"""
