"""llmfleet.serving.prometheus_web_config through Ansible on this host (Debian 12's python3.11 crypt, promtool): the file is
written once, checked by `promtool check web-config` first, and a second run with the same passwords changes nothing;
a changed password gets a new hash; check mode writes nothing; no password and no hash is in any output or diff; a file
the check refuses leaves the live one alone; no user removes it. Then a real Prometheus (Debian's 2.42) with that file
answers 401 without the credential and 200 with it."""

from __future__ import annotations

import getpass
import grp
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

from llmfleet_testing import free_port, run_ansible

SECRET = "web-config-secret-0123456789"


def play(tmp_path, tasks, check=False):
    playbook = tmp_path / f"play-{len(list(tmp_path.glob('play-*.yml')))}.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                     "tasks": [dict(t, name=f"t{i}", ignore_errors=True) for i, t in enumerate(tasks)]}]))
    result = run_ansible("ansible-playbook", str(playbook), "--diff", *(["--check"] if check else []))
    return [task["hosts"]["localhost"] for task in result["plays"][0]["tasks"]], json.dumps(result)


def task(path, users, validate="promtool check web-config %s"):
    return {"llmfleet.serving.prometheus_web_config": {
        "path": str(path), "users": users, "owner": getpass.getuser(), "group": grp.getgrgid(os.getgid()).gr_name,
        "mode": "0640", **({"validate": validate} if validate else {})}}


def test_written_once_checked_kept_while_the_password_stays_and_never_shown(tmp_path):
    web = tmp_path / "web.yml"
    users = [{"name": "ops", "password": SECRET}]
    (results, output) = play(tmp_path, [task(web, users)], check=True)
    assert results[0]["changed"] is True and not web.exists()
    (results, output1) = play(tmp_path, [task(web, users), task(web, users)])
    first, again = results
    assert first.get("failed") is not True, first
    assert first["changed"] is True and first["rehashed"] == ["ops"] and first["users"] == ["ops"]
    assert again["changed"] is False and again["rehashed"] == []
    text = web.read_text()
    assert '"ops": "$2b$12$' in text and oct(web.stat().st_mode & 0o777) == "0o640"
    hashed = json.loads(text.splitlines()[-1].split(": ", 1)[1])
    for out in (output, output1):
        assert SECRET not in out and hashed not in out and "$2b$" not in out
    assert first["diff"]["after"] == "user ops\n"
    # a changed password: a new hash for that user only
    (results, output2) = play(tmp_path, [task(web, [{"name": "ops", "password": "changed-" + SECRET},
                                                    {"name": "ci", "password": "ci-" + SECRET}])])
    assert results[0]["changed"] is True and results[0]["rehashed"] == ["ops", "ci"]
    assert SECRET not in output2 and "$2b$" not in output2
    assert hashed not in web.read_text()


def test_a_file_the_check_refuses_leaves_the_live_one_and_no_user_removes_it(tmp_path):
    web = tmp_path / "web.yml"
    play(tmp_path, [task(web, [{"name": "ops", "password": SECRET}])])
    before = web.read_bytes()
    (results, output) = play(tmp_path, [task(web, [{"name": "ops", "password": "other"}], validate="false %s")])
    assert results[0].get("failed") is True and "failed `false %s`" in results[0]["msg"] and "nothing changed" in results[0]["msg"]
    assert web.read_bytes() == before and "other" not in results[0]["msg"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".llmfleet-web-")]
    # a bad entry: named, the password never shown
    (results, output) = play(tmp_path, [task(web, [{"name": "a:b", "password": SECRET}])])
    assert results[0].get("failed") is True and "users[0] (name 'a:b')" in results[0]["msg"] and SECRET not in output
    (results, _output) = play(tmp_path, [task(web, []), task(web, [])])
    assert [r["changed"] for r in results] == [True, False] and not web.exists()


def test_a_mode_only_change_is_checked_too(tmp_path):
    """The first install writes the file before promtool exists (no check) and again once the package brought it, with the
    same content and only its group and mode new: that second write is checked as any other."""
    web = tmp_path / "web.yml"
    first = dict(task(web, [{"name": "ops", "password": SECRET}], validate=None))
    first["llmfleet.serving.prometheus_web_config"]["mode"] = "0644"
    play(tmp_path, [first])
    (results, _output) = play(tmp_path, [task(web, [{"name": "ops", "password": SECRET}], validate="false %s")])
    assert results[0].get("failed") is True and "failed `false %s`" in results[0]["msg"], results[0]
    assert oct(web.stat().st_mode & 0o777) == "0o644"
    (results, _output) = play(tmp_path, [task(web, [{"name": "ops", "password": SECRET}])])
    assert results[0]["changed"] is True and oct(web.stat().st_mode & 0o777) == "0o640"


def status(url, auth=None):
    request = urllib.request.Request(url)
    if auth:
        import base64   # pylint: disable=import-outside-toplevel
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError:
        return None   # not listening yet


def test_a_real_prometheus_asks_the_users_of_the_file(tmp_path):
    web = tmp_path / "web.yml"
    (results, _output) = play(tmp_path, [task(web, [{"name": "ops", "password": SECRET}])])
    assert results[0]["changed"] is True
    (tmp_path / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    prometheus = subprocess.Popen(["/usr/bin/prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                   f"--web.config.file={web}"], stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while status(f"{base}/-/ready", f"ops:{SECRET}") != 200:
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()[-2000:]
            time.sleep(0.5)
        for path in ("/-/ready", "/api/v1/query?query=up", "/graph"):
            assert status(base + path) == 401, path
            assert status(base + path, f"ops:wrong-{SECRET}") == 401, path
            assert status(base + path, f"ops:{SECRET}") == 200, path
        # the file is read on every request: a changed password counts at once, without a restart
        play(tmp_path, [task(web, [{"name": "ops", "password": "next-" + SECRET}])])
        assert status(f"{base}/-/ready", f"ops:{SECRET}") == 401
        assert status(f"{base}/-/ready", f"ops:next-{SECRET}") == 200
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        log.close()
