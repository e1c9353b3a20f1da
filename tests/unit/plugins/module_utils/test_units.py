"""Every systemd unit the collection writes, rendered by _units and checked by `systemd-analyze verify`: the vLLM unit of
several plans (CPU and GPU), the web UI's unit and the CPU governor's. The tool is part of Debian's systemd package, which
`make units` installs through tests/host-packages.sh (EARLY_PACKAGES); without it these tests fail and say so."""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import subprocess
from typing import Dict, List

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _serving as serving
from ansible_collections.llmfleet.serving.plugins.module_utils import _units as units
from ansible_collections.llmfleet.serving.plugins.module_utils import _webui as webui
from ansible_collections.llmfleet.serving.plugins.module_utils._host_tuning import TunableError, cpu_governor_unit
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import CPU_QWEN3_SMALL, plan_of

CPU_HW = {"accelerators": [], "links": None, "numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24105, "driver_version": None}
# GPU plans of the reference inventories: JSON arguments (--default-chat-template-kwargs, --hf-overrides), patches, CPU sets
GPU_INVENTORIES = ("h100", "v100", "v100_pair", "mixed_4gpu", "dcu_k100")
# CPU plans (the systemd runtime's): two engine versions, a declared and an auto length, extra arguments that need quoting
CPU_DEPLOYMENTS = [
    CPU_QWEN3_SMALL,
    [{"name": "qwen35-small", "model": "Qwen/Qwen3.5-0.8B", "engine": {"version": "0.31.0"}, "extra_env": {"VLLM_LOGGING_LEVEL": "DEBUG"},
      "extra_args": ["--override-generation-config", '{"temperature": 0.5}', "--chat-template-content-format", "string"]}],
]


def analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if not tool:
        pytest.fail("systemd-analyze is missing: install Debian's systemd package (bash tests/host-packages.sh systemd, "
                    "which `make units` runs, or apt-get install systemd)")
    return tool


def verify(files: List[pathlib.Path]) -> List[str]:
    """What `systemd-analyze verify` says about the unit files ([] when nothing): its exit status and every line it prints
    (it only warns, exit 0, about an unknown key or a value it cannot parse, so a line is a failure too)."""
    run = subprocess.run([analyze(), "verify", "--man=no", "--generators=no", *map(str, files)], capture_output=True, text=True,
                         env=dict(os.environ, SYSTEMD_LOG_COLOR="0"), check=False, timeout=60)
    said = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    return said + ([f"exit status {run.returncode}"] if run.returncode else [])


def stand_in(path: pathlib.Path) -> str:
    """An executable where a unit's ExecStart points (verify checks the program exists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def vllm_units(tmp_path: pathlib.Path) -> Dict[str, str]:
    """The unit of every instance of the CPU plans, as the vllm role renders them, and of the GPU reference plans. GPU plans
    run in Docker (they name an image): their arguments (JSON of --hf-overrides and the chat-template kwargs) go through the
    same renderer here with the --host a venv engine has, to check the quoting of every argument a plan writes."""
    python = stand_in(tmp_path / "opt" / "vllm" / "bin" / "python")
    cpu = [serving.plan_instances(plan_host("localhost", CPU_HW, deps)) for deps in CPU_DEPLOYMENTS]
    gpu = [[venv_args(i) for i in serving.plan_instances(plan_of(name))] for name in GPU_INVENTORIES]
    out = {}
    for insts in cpu + gpu:
        for inst in insts:
            out[serving.unit_name(inst)] = serving.systemd_unit(
                inst, python=python, env_path=f"/etc/llmfleet/vllm/{inst['name']}.env", cache_dir=f"/var/lib/llmfleet/vllm/{inst['name']}",
                user="llmfleet-vllm")
    return out


def venv_args(inst: Dict) -> Dict:
    args = list(inst["args"])
    args[args.index("--host") + 1] = inst["bind_address"]
    return dict(inst, args=args)


def webui_unit(tmp_path: pathlib.Path) -> str:
    venv = tmp_path / "opt" / "open-webui" / "0.12.4"
    stand_in(venv / "bin" / "open-webui")
    return webui.unit({"port": 3080, "venv": str(venv), "version": "0.12.4", "user": "open-webui",
                       "env_path": "/etc/llmfleet/open-webui.env", "data_dir": "/var/lib/open-webui"})


def write(tmp_path: pathlib.Path, texts: Dict[str, str]) -> List[pathlib.Path]:
    folder = tmp_path / "units"
    folder.mkdir(exist_ok=True)
    paths = []
    for name, text in texts.items():
        path = folder / f"{name}.service"
        path.write_text(text)
        paths.append(path)
    return paths


def test_every_unit_kind_the_collection_writes_passes_systemd_analyze_verify(tmp_path):
    texts = vllm_units(tmp_path)
    assert {"llmfleet-vllm-qwen3-small-0", "llmfleet-vllm-qwen35-small-0"} <= set(texts) and len(texts) >= 8, "CPU and GPU plans' instances"
    assert any("--default-chat-template-kwargs" in t for t in texts.values()) and any("CPUAffinity=" in t for t in texts.values())
    texts[webui.SERVICE] = webui_unit(tmp_path)
    texts["llmfleet-cpu-governor"] = cpu_governor_unit("performance")
    assert verify(write(tmp_path, texts)) == []


def test_a_unit_verify_refuses_fails_the_check(tmp_path):
    """The check above can fail: a planted unit with an unknown key (verify only warns) and one whose program is missing."""
    good = cpu_governor_unit("performance")
    unknown_key = good.replace("RemainAfterExit=yes", "RemainAfterExit=yes\nRemainAfterExitt=yes")
    said = verify(write(tmp_path, {"unknown-key": unknown_key}))
    assert any("RemainAfterExitt" in line for line in said), said
    missing = webui_unit(tmp_path).replace("/bin/open-webui", "/bin/no-such-program")
    said = verify(write(tmp_path, {"missing-program": missing}))
    assert any("no-such-program" in line for line in said) and said[-1].startswith("exit status"), said


def test_the_vllm_unit_runs_exactly_the_plans_arguments(tmp_path):
    for deps in CPU_DEPLOYMENTS:
        for inst in serving.plan_instances(plan_host("localhost", CPU_HW, deps)):
            text = serving.systemd_unit(inst, python="/opt/v/bin/python", env_path="/e/x.env", cache_dir="/c/x", user="u")
            exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))[len("ExecStart="):]
            assert systemd_split(exec_start) == ["/opt/v/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", *inst["args"]]


def systemd_split(line: str) -> List[str]:
    """systemd's word splitting for ExecStart (double quotes with C escapes, %% and $$)."""
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line, posix=True)]


@pytest.mark.parametrize("arg", ["plain", '{"enable_thinking": false}', "a b", "100%", "$HOME", "${HOME}", 'back\\slash "q"', "", ";",
                                 "it's"])
def test_exec_quoting_round_trips(arg):
    assert systemd_split(units.exec_quote(arg)) == [arg]


def test_the_governor_units_command_is_the_shell_loop():
    text = cpu_governor_unit("schedutil")
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))[len("ExecStart="):]
    assert systemd_split(exec_start) == ["/bin/sh", "-c", 'for f in /sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor; '
                                         'do echo schedutil > "$f"; done']
    with pytest.raises(TunableError, match="not a cpufreq governor name"):
        cpu_governor_unit("performance; reboot")


def unit_with(**changes) -> units.Unit:
    base = {"description": "d", "exec_start": ["/bin/true"], "service": (("Type", "simple"),)}
    base.update(changes)
    return units.Unit(**base)


@pytest.mark.parametrize("changes, message", [
    ({"exec_start": ["true"]}, "absolute path"),
    ({"exec_start": []}, "absolute path"),
    ({"exec_start": ["/opt/my venv/bin/python"]}, "absolute path"),
    ({"exec_start": ["/bin/echo", "two\nlines"]}, "control character"),
    ({"description": "two\nlines"}, "newline"),
    ({"description": " padded"}, "leading or trailing blanks"),
    ({"service": (("WorkingDirectory", "relative/dir"),)}, "absolute path"),
    ({"service": (("EnvironmentFile", "/etc/x.env\\"),)}, "backslash"),
    ({"service": (("RestartSec", "5%"),)}, "'%' has no literal meaning"),
    ({"service": (("not-a-key", "x"),)}, "not a unit setting name"),
    ({"service": (("RemainAfterExit", True),)}, "a string or a whole number"),
    ({"comments": ("a\nb",)}, "one line each"),
])
def test_values_a_unit_cannot_carry_are_refused(changes, message):
    with pytest.raises(units.UnitError, match=message):
        units.render(unit_with(**changes))


def test_specifiers_stay_literal_where_systemd_expands_them():
    text = units.render(unit_with(description="100% sure", service=(("User", "u"),)))
    assert "Description=100%% sure" in text
    assert text.endswith("[Install]\nWantedBy=multi-user.target\n") and "\n\n[Service]\nUser=u\nExecStart=/bin/true\n\n" in text


def test_a_plan_value_a_unit_cannot_carry_names_the_instance():
    [inst] = serving.plan_instances(plan_host("localhost", CPU_HW, CPU_QWEN3_SMALL))
    inst["args"] = [*inst["args"], "--bad\nvalue"]
    with pytest.raises(serving.ServingError, match=r"qwen3-small-0: .*control character"):
        serving.systemd_unit(inst, python="/opt/v/bin/python", env_path="/e/x.env", cache_dir="/c/x", user="u")
