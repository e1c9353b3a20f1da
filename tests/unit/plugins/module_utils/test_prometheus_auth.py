"""Prometheus's users (monitoring_prometheus_users) and its web configuration file: what stops the role before any change
(a listener off loopback without a user, a bad entry named by index and name, never its password), and the file - bcrypt
hashes made with this machine's Python crypt (Debian 12's python3.11, as on the monitoring host), accepted by Debian's
`promtool check web-config`, the same bytes while the passwords stay the same."""

from __future__ import annotations

import shutil
import subprocess
import warnings

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _prometheus_auth as pa

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt   # pylint: disable=deprecated-module  # what the prometheus_web_config module hashes with

SECRET = "s3cret-Pa55word-not-in-any-message"


def matches(password, hashed):
    return crypt.crypt(password, hashed) == hashed


def make(password):
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


@pytest.fixture(autouse=True)
def promtool_installed():
    """Not a skip: `make units` installs Debian's prometheus (promtool with it)."""
    assert shutil.which("promtool"), "promtool is not installed: run `make units` (tests/host-packages.sh prometheus)"


@pytest.mark.parametrize("listen, loopback", [("127.0.0.1:9090", True), ("127.0.0.2:9091", True), ("[::1]:9090", True),
                                              ("localhost:9090", True), ("172.30.77.10:9090", False),
                                              ("0.0.0.0:9090", False), ("[::]:9090", False), ("10.0.0.5:9090", False)])
def test_only_a_loopback_listener_may_go_without_a_user(listen, loopback):
    assert pa.is_loopback(listen) is loopback
    found = pa.problems(listen, [])
    if loopback:
        assert found == []
    else:
        [message] = found
        assert f"monitoring_prometheus_listen={listen} is not loopback" in message
        assert "Add a user to monitoring_prometheus_users" in message and "127.0.0.1:9090" in message
    assert pa.problems(listen, [{"name": "ops", "password": SECRET}]) == []


@pytest.mark.parametrize("users, said", [
    ([{"name": "", "password": SECRET}], "monitoring_prometheus_users[0] (name ''): the name must be a non-empty string"),
    ([{"password": SECRET}], "monitoring_prometheus_users[0] (name None): the name must be a non-empty string"),
    ([{"name": "ok", "password": SECRET}, {"name": "a:b", "password": SECRET}], "monitoring_prometheus_users[1] (name 'a:b'): a name may hold no ':'"),
    ([{"name": "tab\there", "password": SECRET}], "no control character"),
    ([{"name": "ops", "password": SECRET}, {"name": "ops", "password": SECRET}],
     "monitoring_prometheus_users[1] (name 'ops'): the same name as entry 0"),
    ([{"name": "ops", "password": ""}], "monitoring_prometheus_users[0] (name 'ops'): the password must be a non-empty string"),
    ([{"name": "ops"}], "monitoring_prometheus_users[0] (name 'ops'): the password must be a non-empty string"),
    ([{"name": "ops", "password": 1234}], "the password must be a non-empty string"),
    ([{"name": "ops", "password": "x" * 73}], "longer than 72 bytes"),
    ([{"name": "ops", "password": SECRET + " "}], "monitoring_prometheus_users[0] (name 'ops'): the password starts or ends with a space"),
    ([{"name": "ops", "password": SECRET, "hash": "x"}], "unknown keys hash"),
    (["ops"], "monitoring_prometheus_users[0] must be a mapping"),
    ("ops", "must be a list"),
])
def test_a_bad_entry_is_named_by_index_and_name_and_never_shows_its_password(users, said):
    found = pa.problems("172.30.77.10:9090", users)
    assert any(said in m for m in found), found
    assert not any(SECRET in m for m in found)
    with pytest.raises(pa.PrometheusAuthError) as err:
        pa.checked_users(users)
    assert SECRET not in str(err.value)


def test_the_file_passes_promtool_and_keeps_its_hashes_while_the_passwords_stay(tmp_path):
    users = [("ops", SECRET), ("grafana", "another-one")]
    text, fresh = pa.render(users, None, matches, make)
    assert fresh == ["ops", "grafana"]
    assert SECRET not in text and "another-one" not in text
    hashes = pa.read_hashes(text)
    assert list(hashes) == ["ops", "grafana"] and all(h.startswith("$2b$12$") for h in hashes.values())
    assert matches(SECRET, hashes["ops"]) and not matches("wrong", hashes["ops"])
    web = tmp_path / "web.yml"
    web.write_text(text)
    checked = subprocess.run(["promtool", "check", "web-config", str(web)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # the same users: the same bytes, nothing hashed
    again, fresh = pa.render(users, text, matches, make)
    assert (again, fresh) == (text, [])
    # one password changed, one user added: only those get a new hash
    changed, fresh = pa.render([("ops", "new-password"), ("grafana", "another-one"), ("ci", "third")], text, matches, make)
    assert fresh == ["ops", "ci"]
    now = pa.read_hashes(changed)
    assert now["grafana"] == hashes["grafana"] and now["ops"] != hashes["ops"] and matches("new-password", now["ops"])
    # a user removed: gone from the file
    assert list(pa.read_hashes(pa.render([("grafana", "another-one")], changed, matches, make)[0])) == ["grafana"]


def test_names_that_need_quoting_round_trip_and_pass_promtool(tmp_path):
    users = [('o"ps\\x', SECRET), ("ünï cödé", "pw"), ("#hash", "pw2")]
    text, _fresh = pa.render(users, None, matches, make)
    assert list(pa.read_hashes(text)) == [u[0] for u in users]
    assert pa.render(users, text, matches, make) == (text, [])
    web = tmp_path / "web.yml"
    web.write_text(text)
    checked = subprocess.run(["promtool", "check", "web-config", str(web)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("edited", [
    "basic_auth_users:\n  ops: $2b$12$abcdefghijklmnopqrstuv0123456789ABCDEFGHIJKLMNOPQRSTU\n",   # unquoted: not our shape
    "tls_server_config: {}\nbasic_auth_users:\n",
    "basic_auth_users:\n  \"ops\": \"not-a-hash\"\n",
    "",
])
def test_a_file_in_another_shape_gets_every_user_hashed_anew(edited):
    assert pa.read_hashes(edited) == {}
    _text, fresh = pa.render([("ops", SECRET)], edited, matches, make)
    assert fresh == ["ops"]


def test_a_python_without_blowfish_is_said_with_the_fix():
    with pytest.raises(pa.PrometheusAuthError, match="lacks Blowfish"):
        pa.render([("ops", SECRET)], None, matches, lambda pw: "*0")


def test_the_diff_shows_user_names_only():
    text, _fresh = pa.render([("ops", SECRET), ("ci", "x")], None, matches, make)
    shown = pa.summary(text)
    assert shown == "user ci\nuser ops\n" and "$2b$" not in shown
    assert pa.summary(None) == "(no file)\n"
    assert "another shape" in pa.summary("basic_auth_users:\n  ops: plain\n")
