"""host_common's controller_secret on this machine: a secret is made once in <inventory>/.secrets/ (0600), and a
secret still at its old place, <inventory>/secrets/, stops the run with the move to make (a new one would change
every engine's key)."""

from __future__ import annotations

import json
import os
import stat

from llmfleet_testing import run_ansible


def run(tmp_path, secret_file):
    playbook = tmp_path / "secret.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "llmfleet.serving.host_common", "tasks_from": "controller_secret.yml"},
         "vars": {"host_common_secret_file": str(secret_file)}}]}]))
    return run_ansible("ansible-playbook", str(playbook))


def test_a_secret_is_made_once_in_the_hidden_folder(tmp_path):
    secret = tmp_path / "inv" / ".secrets" / "vllm_api_key"
    first = run(tmp_path, secret)
    assert first["stats"]["localhost"]["failures"] == 0, first
    value = secret.read_text()
    assert len(value.strip()) >= 32 and stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    run(tmp_path, secret)
    assert secret.read_text() == value


def test_a_secret_at_the_old_place_stops_the_run_with_the_move(tmp_path):
    old = tmp_path / "inv" / "secrets" / "vllm_api_key"
    old.parent.mkdir(parents=True)
    old.write_text("the-old-key\n")
    result = run(tmp_path, tmp_path / "inv" / ".secrets" / "vllm_api_key")
    assert result["stats"]["localhost"]["failures"] == 1
    assert f"{old} is where this secret was kept before" in json.dumps(result)
    assert "mv secrets .secrets" in json.dumps(result)
    assert not (tmp_path / "inv" / ".secrets").exists()
