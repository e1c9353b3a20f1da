"""llmfleet.serving.config_tree through Ansible on this host: templates rendered on the controller, the whole tree
written to a staging folder and checked there, installed only when the check passes and only the files that
differ; a second run writes and runs nothing; a secret file's content is in no output and no diff. The check
here is a shell command that stands for `nginx -t` (the fleet lab runs the real one); it logs each run."""

from __future__ import annotations

import getpass
import grp
import json
import os

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _config_tree as ct

from llmfleet_testing import run_ansible

SECRET = "Bearer sk-config-tree-secret-0123456789"


def play(tmp_path, tasks, check=False):
    """Run tasks in one play (each `ignore_errors`) with --diff, return (results in order, the whole output)."""
    playbook = tmp_path / f"play-{len(list(tmp_path.glob('play-*.yml')))}.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                     "vars": {"greeting": "hello", "secret_header": SECRET},
                                     "tasks": [dict(t, name=f"t{i}", ignore_errors=True) for i, t in enumerate(tasks)]}]))
    args = ["ansible-playbook", str(playbook), "--diff"] + (["--check"] if check else [])
    result = run_ansible(*args)
    return [task["hosts"]["localhost"] for task in result["plays"][0]["tasks"]], json.dumps(result)


@pytest.fixture()
def tree(tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "main.conf.j2").write_text("# {{ greeting }}\ninclude conf.d/*.conf;\nok\n")
    (templates / "site.conf.j2").write_text("server {{ greeting }};\n")
    (templates / "auth.inc.j2").write_text("proxy_set_header Authorization \"{{ secret_header }}\";\n")
    root, log = tmp_path / "live", tmp_path / "checks.log"
    root.mkdir()
    owner, group = getpass.getuser(), grp.getgrgid(os.getgid()).gr_name

    def task(main_src="main.conf.j2"):
        return {"llmfleet.serving.config_tree": {
            "templates": [{"src": main_src, "dest": "main.conf", "mode": "0644", "secret": False},
                          {"src": "site.conf.j2", "dest": "conf.d/site.conf", "mode": "0644", "secret": False},
                          {"src": "auth.inc.j2", "dest": "conf.d/auth.inc", "mode": "0600", "secret": True}],
            "root": str(root), "staging": str(tmp_path / "staging"),
            # stands for nginx -t -c %s/main.conf: it reads the staging tree, logs each run, and fails without `ok`
            "validate": ["sh", "-c", f"echo checked >> {log}; grep -qx ok %s/main.conf || "
                                     "{ echo 'main.conf: unknown directive' >&2; exit 1; }"],
            "prune": ["conf.d"], "owner": owner, "group": group}}
    return {"task": task, "root": root, "log": log, "templates": templates, "path": tmp_path}


def checks(log):
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_installs_a_checked_tree_once_and_keeps_the_secret_out_of_every_output(tree, tmp_path):
    root = tree["root"]
    (results, output) = play(tmp_path, [tree["task"](), tree["task"]()])
    first, again = results
    assert first.get("failed") is not True, first
    assert first["changed"] is True and sorted(first["installed"]) == ["conf.d/auth.inc", "conf.d/site.conf", "main.conf"]
    assert (root / "main.conf").read_text() == "# hello\ninclude conf.d/*.conf;\nok\n"
    assert (root / "conf.d/auth.inc").read_text() == f'proxy_set_header Authorization "{SECRET}";\n'
    assert oct((root / "conf.d/auth.inc").stat().st_mode & 0o777) == "0o600"
    assert oct((root / "main.conf").stat().st_mode & 0o777) == "0o644"
    # the staging copy is the same bytes (paths relative to the folder)
    assert (tmp_path / "staging/main.conf").read_bytes() == (root / "main.conf").read_bytes()
    assert again["changed"] is False and again["installed"] == [] and again["removed"] == []
    assert checks(tree["log"]) == 1, "a tree already live is not checked again"
    assert SECRET not in output and "sk-config-tree-secret" not in output
    diff_after = [d["after"] for d in first["diff"]]
    assert "(secret: content not shown, changed)\n" in diff_after and "server hello;\n" in diff_after


def test_a_tree_the_check_rejects_leaves_the_live_files_alone(tree, tmp_path):
    root = tree["root"]
    play(tmp_path, [tree["task"]()])
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    (tree["templates"] / "broken.conf.j2").write_text("# {{ greeting }} broken\nllmfleet_no_such_directive on;\n")
    (results, _output) = play(tmp_path, [tree["task"]("broken.conf.j2")])
    failed = results[0]
    assert failed.get("failed") is True and failed["stage"] == "validate"
    assert "main.conf: unknown directive" in failed["msg"] and "are unchanged" in failed["msg"]
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    assert checks(tree["log"]) == 2


def test_stale_files_in_a_pruned_folder_go_and_check_mode_writes_nothing(tree, tmp_path):
    root = tree["root"]
    play(tmp_path, [tree["task"]()])
    (root / "conf.d/old_edge.conf").write_text("listen 8000;\n")
    (root / "keep.txt").write_text("not in a pruned folder\n")
    (tree["templates"] / "site.conf.j2").write_text("server {{ greeting }} again;\n")
    (results, _output) = play(tmp_path, [tree["task"]()], check=True)
    check = results[0]
    assert check["changed"] is True and check["installed"] == ["conf.d/site.conf"] and check["removed"] == ["conf.d/old_edge.conf"]
    assert (root / "conf.d/site.conf").read_text() == "server hello;\n" and (root / "conf.d/old_edge.conf").exists()
    assert checks(tree["log"]) == 1
    (results, _output) = play(tmp_path, [tree["task"]()])
    assert results[0]["changed"] is True and results[0]["removed"] == ["conf.d/old_edge.conf"]
    assert not (root / "conf.d/old_edge.conf").exists() and (root / "keep.txt").exists()
    assert (root / "conf.d/site.conf").read_text() == "server hello again;\n"


def test_paths_modes_and_the_validate_command_are_checked():
    for bad in ("../etc/passwd", "/etc/nginx/x", "a//b", "a/./b", ""):
        with pytest.raises(ct.ConfigTreeError):
            ct.check_path(bad)
    assert ct.parse_mode("0640") == 0o640
    for bad in ("rw-r--r--", "0888", "12345", ""):
        with pytest.raises(ct.ConfigTreeError):
            ct.parse_mode(bad)
    with pytest.raises(ct.ConfigTreeError):
        ct.validate_argv(["nginx", "-t"], "/s")
    assert ct.validate_argv(["nginx", "-t", "-c", "%s/nginx.conf"], "/s/") == ["nginx", "-t", "-c", "/s/nginx.conf"]
    with pytest.raises(ct.ConfigTreeError):
        ct.wanted_files([{"path": "a", "content": "", "mode": "0644"}], [{"path": "a", "content": "", "mode": "0600"}])


def test_what_differs_is_bytes_mode_or_owner_and_stale_is_only_in_pruned_folders():
    wanted = ct.wanted_files([{"path": "nginx.conf", "content": "x\n", "mode": "0644"}],
                             [{"path": "llmfleet/auth.inc", "content": "k\n", "mode": "0600"}])
    same = {"nginx.conf": ct.Present(b"x\n", 0o644, 0, 0), "llmfleet/auth.inc": ct.Present(b"k\n", 0o600, 0, 0)}
    assert ct.differing(wanted, same, 0, 0) == []
    assert ct.differing(wanted, dict(same, **{"nginx.conf": ct.Present(b"x\n", 0o666, 0, 0)}), 0, 0) == ["nginx.conf"]
    assert ct.differing(wanted, dict(same, **{"llmfleet/auth.inc": None}), 0, 0) == ["llmfleet/auth.inc"]
    assert ct.differing(wanted, same, 0, 33) == ["nginx.conf", "llmfleet/auth.inc"]
    found = ["llmfleet/auth.inc", "llmfleet/edge.conf", "llmfleet/sub/x.conf"]
    assert ct.stale(found, wanted, ["llmfleet"]) == ["llmfleet/edge.conf"]
    entries = ct.diff_entries(wanted, same, ["llmfleet/auth.inc"], ["llmfleet/edge.conf"], "/etc/nginx")
    assert "k\n" not in json.dumps(entries)
    assert entries[1]["before_header"] == "/etc/nginx/llmfleet/edge.conf" and entries[1]["after"] == ""
