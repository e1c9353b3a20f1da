"""The engines' key (module_utils/_engine_keys): the keys each phase of a rotation accepts, the version floor of two keys,
the --config file that holds them, and the message that stops a run from replacing a key a fleet still uses."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.module_utils import _engine_keys as k

OLD, NEW = "old-key-0123456789abcdefABCDEF", "new-key-0123456789abcdefABCDEF"


@pytest.mark.parametrize("has_next, has_previous, phase", [(False, False, "none"), (True, False, "learn"), (False, True, "forget"),
                                                           (True, True, "learn")])
def test_the_files_say_the_phase(has_next, has_previous, phase):
    assert k.rotation_phase(has_next, has_previous) == phase


def test_the_key_sets_of_each_phase_keep_the_gateways_key_accepted():
    # before: the gateway sends OLD; learn: it still sends OLD, the engines learn NEW; switch: the key file holds NEW,
    # OLD is the previous key; forget (the last roll): NEW alone. At every step the gateway's key is accepted.
    steps = [
        ("none", OLD, k.accepted_keys(OLD)),
        ("learn", OLD, k.accepted_keys(OLD, next_key=NEW)),
        ("switched", NEW, k.accepted_keys(NEW, previous=OLD)),
        ("forget", NEW, k.accepted_keys(NEW, previous=OLD, drop_previous=True)),
        ("done", NEW, k.accepted_keys(NEW)),
    ]
    assert [keys for _step, _sent, keys in steps] == [[OLD], [OLD, NEW], [NEW, OLD], [NEW], [NEW]]
    for step, sent, keys in steps:
        assert keys[0] == sent, step              # the first is the one the gate sends, as the gateway does
    # learn and switched accept the same two keys: one --config file, no restart between them
    assert k.config_text(steps[1][2]) == k.config_text(steps[2][2])


def test_a_switch_cut_short_accepts_the_same_two_keys():
    # after `previous := key` (or also `key := next`) the three files hold two distinct keys
    assert sorted(k.accepted_keys(OLD, next_key=NEW, previous=OLD)) == sorted([OLD, NEW])
    assert sorted(k.accepted_keys(NEW, next_key=NEW, previous=OLD)) == sorted([OLD, NEW])


def test_one_key_is_taken_as_it_is_two_must_suit_the_config_file_and_the_header():
    assert k.accepted_keys(" short \n") == ["short"]          # as before rotations existed
    with pytest.raises(k.EngineKeyError, match="rotation's next key file does not hold a usable key") as err:
        k.accepted_keys(OLD, next_key='has "quotes" and spaces 0123456789')
    assert "quotes" not in str(err.value)                      # the message never shows the key
    with pytest.raises(k.EngineKeyError, match="the key file is empty"):
        k.accepted_keys("", next_key=NEW)


@pytest.mark.parametrize("version, ok", [("0.8.5", False), ("0.10.0", False), ("0.10.1", False), ("0.10.2", False),
                                         ("0.11.0", True), ("0.11.0+cpu", True), ("0.17.1", True), ("0.32.0", True)])
def test_two_keys_from_vllm_0_11_0(version, ok):
    assert k.takes_several(version) is ok
    blockers = k.rotation_blockers([{"name": "tiny-a-0", "engine_version": version}], "engine1")
    assert (blockers == []) is ok
    if not ok:
        assert blockers == [f"engine1 / tiny-a-0: vLLM {version} takes one key"]


def test_the_refusal_names_the_instances_the_floor_and_what_to_do():
    text = k.rotation_refusal(k.rotation_blockers([{"name": "a-0", "engine_version": "0.10.1"}, {"name": "b-0", "engine_version": "0.11.0"},
                                                   {"name": "c-0", "engine_version": "main"}], "gpu-01"))
    assert "gpu-01 / a-0: vLLM 0.10.1 takes one key" in text and "b-0" not in text
    assert "gpu-01 / c-0: its engine version 'main' is not a version" in text
    assert "from vLLM 0.11.0" in text and "vLLM PR #18548" in text and "playbooks/upgrade.yml" in text and "nothing was changed" in text
    assert k.rotation_refusal([]) == ""


def test_the_config_file_is_what_vllms_reader_turns_into_api_key_with_both():
    text = k.config_text([NEW, OLD])
    # vLLM's FlexibleArgumentParser.load_config_file (0.11.0 on): yaml.safe_load, then a list value becomes `--api-key A B`
    assert yaml.safe_load(text) == {"api-key": sorted([OLD, NEW])}
    assert text == k.config_text([OLD, NEW])                   # sorted: the same bytes in either order
    with pytest.raises(k.EngineKeyError, match="only written for two keys"):
        k.config_text([OLD, OLD])


def test_a_fresh_fleet_may_make_its_key():
    assert k.missing_key_stop("/inv/.secrets/vllm_api_key", {}) == ""
    assert k.missing_key_stop("/inv/.secrets/vllm_api_key", {"e1": [], "e2": []}) == ""


def test_a_fleet_that_runs_with_a_key_stops_and_says_where_it_is_and_how_to_restore_or_rotate():
    holders = {"e2": ["llmfleet-vllm-qwen-0"], "e1": ["/var/lib/llmfleet/vllm/tiny-a-0.api_keys.yaml", "/etc/llmfleet/vllm/tiny-a-0.env"]}
    text = k.missing_key_stop("/inv/.secrets/vllm_api_key", holders)
    assert text.startswith("/inv/.secrets/vllm_api_key is missing, and nothing was changed")
    assert "e1: /etc/llmfleet/vllm/tiny-a-0.env; e2: llmfleet-vllm-qwen-0; e1: /var/lib/llmfleet/vllm/tiny-a-0.api_keys.yaml" in text
    assert "answer 401" in text
    assert "on e1, read it with `sudo grep '^VLLM_API_KEY=' /etc/llmfleet/vllm/tiny-a-0.env`" in text   # an env file first
    assert "mode 0600" in text and "ansible-playbook playbooks/rotate_key.yml" in text
    only_docker = k.missing_key_stop("/k", {"e2": ["llmfleet-vllm-qwen-0"]})
    assert "`sudo docker exec llmfleet-vllm-qwen-0 printenv VLLM_API_KEY`" in only_docker
    mid_rotation = k.missing_key_stop("/k", {"e1": ["/var/lib/llmfleet/vllm/tiny-a-0.api_keys.yaml"]})
    assert "engine_auth.inc" in mid_rotation


def test_more_than_four_places_are_counted():
    text = k.missing_key_stop("/k", {f"e{i}": [f"/etc/llmfleet/vllm/a-{i}.env"] for i in range(7)})
    assert "e3: /etc/llmfleet/vllm/a-3.env and 3 more" in text and "e4:" not in text


def test_hosts_out_of_the_run_or_without_an_answer_stop_a_new_key_too():
    assert "does not reach e3, e4 (--limit)" in k.missing_key_stop("/k", {"e1": []}, unasked=["e3", "e4"])
    assert "Docker did not answer on e2" in k.missing_key_stop("/k", {}, unknown=["e2"])
    # a holder found is the stronger answer
    assert "already runs with the engines' key" in k.missing_key_stop("/k", {"e1": ["/x/a.env"]}, unasked=["e3"])


FILE_KEY, OTHER = "f" * 48, "o" * 48


def test_running_keys_read_grep_lines_of_env_files_and_containers():
    lines = [f'/etc/llmfleet/vllm/qwen-0.env:VLLM_API_KEY="{FILE_KEY}"', f"llmfleet-vllm-qwen-1:VLLM_API_KEY={OTHER}",
             "/etc/llmfleet/vllm/qwen-2.env:OTHER=1", ""]
    assert k.running_keys(lines) == [{"where": "/etc/llmfleet/vllm/qwen-0.env", "key": FILE_KEY},
                                     {"where": "llmfleet-vllm-qwen-1", "key": OTHER}]


def test_instances_on_the_files_key_or_a_rotations_go_on():
    running = [{"where": "/etc/llmfleet/vllm/qwen-0.env", "key": FILE_KEY}]
    assert k.wrong_key_stop("/k", "gpu-01", [FILE_KEY], running) == ""
    assert k.wrong_key_stop("/k", "gpu-01", [OTHER, FILE_KEY], running) == ""     # a rotation's two keys
    assert k.wrong_key_stop("/k", "gpu-01", [FILE_KEY], []) == ""                 # nothing runs yet


def test_an_instance_on_another_key_stops_the_run_naming_it_by_fingerprint_never_the_key():
    running = [{"where": "/etc/llmfleet/vllm/qwen-0.env", "key": OTHER}, {"where": "llmfleet-vllm-qwen-1", "key": FILE_KEY}]
    message = k.wrong_key_stop("/ctl/.secrets/vllm_api_key", "gpu-01", [FILE_KEY], running)
    assert message.startswith("/ctl/.secrets/vllm_api_key does not hold the key the engines on gpu-01 run with, and nothing was changed")
    assert f"/etc/llmfleet/vllm/qwen-0.env (key {k.fingerprint(OTHER)})" in message and "qwen-1" not in message
    assert f"the file's is {k.fingerprint(FILE_KEY)}" in message
    assert OTHER not in message and FILE_KEY not in message
    assert "sudo grep '^VLLM_API_KEY=' /etc/llmfleet/vllm/qwen-0.env" in message and "playbooks/rotate_key.yml" in message
    # a container: how to read it there
    container = k.wrong_key_stop("/k", "gpu-01", [FILE_KEY], [{"where": "llmfleet-vllm-qwen-1", "key": OTHER}])
    assert "sudo docker exec llmfleet-vllm-qwen-1 printenv VLLM_API_KEY" in container
