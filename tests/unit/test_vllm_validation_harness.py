"""The plumbing of the vLLM validation crosscheck (tests/vllm_validation.py and tests/crosscheck/vllm_config_worker.py)
with a STAND-IN vLLM: a tiny package named `vllm`, written below into a temporary folder, with just the names the worker
imports (the serve parser, EngineArgs, the model registry, the platform, ReasoningConfig) and a few checks of its own.
It is a stand-in because the real vLLM CPU build is a 3 GB venv that only `make crosscheck` makes, and because its
verdicts depend on its release: this test checks the harness's own logic - jobs in, one verdict per job out, the stage
and message of a refusal, "unchecked" for a model class that does not import, identical command lines sent once, the
planner's refusals grouped by reason, the report's numbers - not vLLM's. The real validation is
tests/crosscheck/test_vllm_validation.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import sys
import textwrap
from typing import Any, Dict, List

import pytest

from vllm_validation import (WORKER, Job, Model, VersionReport, job_key, load_models, plan_jobs, reason_of, start_workers, table,
                             validate, write_model_dir)

STANDIN = {
    "vllm/__init__.py": "",
    "vllm/engine/__init__.py": "",
    "vllm/engine/arg_utils.py": '''
        import json, os

        class AsyncEngineArgs:
            def __init__(self, model, dtype, max_model_len):
                self.model, self.dtype, self.max_model_len = model, dtype, max_model_len

            @classmethod
            def from_cli_args(cls, ns):
                return cls(ns.model, ns.dtype, ns.max_model_len)

            def _config(self):
                with open(os.path.join(self.model, "config.json")) as handle:
                    return json.load(handle)

            def create_model_config(self):
                from vllm.model_executor.models.registry import ModelRegistry, _try_inspect
                config = self._config()
                for arch in config["architectures"]:
                    if _try_inspect(arch) is None:
                        raise ValueError(f"Model architectures {config['architectures']} failed to be inspected.")
                if self.dtype == "float16" and config["model_type"] == "gemma3":
                    raise ValueError(f"The model type {config['model_type']!r} does not support float16.")
                if not os.path.isfile(os.path.join(self.model, "sentence_bert_config.json")) and config.get("needs_side_file"):
                    raise ValueError("sentence_bert_config.json is missing")

            def create_engine_config(self):
                if self.max_model_len > self._config()["max_position_embeddings"]:
                    raise ValueError(f"max_model_len {self.max_model_len} is above the derived length")
    ''',
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "",
    "vllm/model_executor/models/registry.py": '''
        def _run_in_subprocess(fn):
            raise AssertionError("the worker must inspect in-process")

        class _LazyRegisteredModel:
            def __init__(self, class_name):
                self.class_name = class_name

            def inspect_model_cls(self):
                if self.class_name == "NeedsTorchvision":
                    raise ImportError("No module named 'torchvision'")
                return _run_in_subprocess(lambda: self.class_name)

        class _Registry:
            models = {"LlamaForCausalLM": _LazyRegisteredModel("LlamaForCausalLM"),
                      "Gemma3ForCausalLM": _LazyRegisteredModel("Gemma3ForCausalLM"),
                      "VisionModel": _LazyRegisteredModel("NeedsTorchvision")}

        ModelRegistry = _Registry()

        def _try_inspect(arch):
            try:
                return ModelRegistry.models[arch].inspect_model_cls()
            except Exception:
                return None
    ''',
    "vllm/platforms/__init__.py": '''
        class CpuPlatform:
            def verify_quantization(self, quant):
                raise ValueError("the stand-in CPU platform supports no quantization")

        current_platform = CpuPlatform()
    ''',
    "vllm/config/__init__.py": "",
    "vllm/config/reasoning.py": '''
        class ReasoningParserManager:
            @staticmethod
            def get_reasoning_parser(name):
                return name

        class ReasoningConfig:
            def initialize_token_ids(self, model_config):
                raise AssertionError("needs a tokenizer")
    ''',
    "vllm/utils/__init__.py": "",
    "vllm/utils/argparse_utils.py": '''
        import argparse

        class FlexibleArgumentParser(argparse.ArgumentParser):
            pass
    ''',
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/serve.py": '''
        class _Serve:
            name = "serve"

            def subparser_init(self, sub):
                p = sub.add_parser("serve")
                p.add_argument("model_tag")
                p.add_argument("--model", default="the-default-model")
                p.add_argument("--port", type=int, default=8000)
                p.add_argument("--dtype", choices=["auto", "float16", "bfloat16"], default="auto")
                p.add_argument("--max-model-len", type=int, default=2048)

            def validate(self, ns):
                if ns.port == 8999:
                    raise ValueError("port 8999 is reserved by the stand-in")

        def cmd_init():
            return [_Serve()]
    ''',
}


def make_standin(folder: pathlib.Path, version: str) -> str:
    """The stand-in package in `folder` (with a vllm dist-info of `version`) and a python that imports it: its path."""
    for name, text in STANDIN.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    info = folder / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n", encoding="utf-8")
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{folder}" exec "{sys.executable}" "$@"\n', encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python)


def model(label: str, model_type: str = "llama", arch: str = "LlamaForCausalLM", files: Dict[str, Any] = None, **config) -> Model:
    cfg = dict(model_type=model_type, architectures=[arch], max_position_embeddings=4096, **config)
    return Model(label, f"org/{label}", "https://example.invalid/config.json", cfg, files or {}, corpus=True)


def job(version: str, m: Model, *args: str) -> Job:
    return Job(version, m, ["/models/x", *args], [("profile-a", "x-0")])


def run(tmp_path: pathlib.Path, jobs: List[Job], versions=("1.0.0",), early: bool = False) -> Dict[str, VersionReport]:
    """validate() over `jobs` with a stand-in per version; `early`: the workers are started before the model folders
    are written, as the crosscheck starts them before planning."""
    pythons = {v: make_standin(tmp_path / f"vllm-{v}", v) for v in versions}
    started = start_workers(pythons, tmp_path / "cache") if early else None
    for m in {j.model.label: j.model for j in jobs}.values():
        write_model_dir(m, tmp_path / "cache" / "models")
    reports: Dict[str, VersionReport] = {}
    validate(pythons, jobs, reports, tmp_path / "cache", started=started)
    if started:
        assert all(w.proc.poll() is not None for w in started.values()), "validate() stops the workers it was given"
    return reports


def test_each_job_gets_its_verdict_stage_and_message(tmp_path):
    llama, gemma, vision = model("llama"), model("gemma", "gemma3", "Gemma3ForCausalLM"), model("vis", arch="VisionModel")
    jobs = [job("1.0.0", llama, "--dtype", "bfloat16", "--max-model-len", "4096"),       # accepted
            job("1.0.0", llama, "--dtype", "half"),                                       # parse: not a choice
            job("1.0.0", llama, "--port", "8999"),                                        # the subcommand's validate
            job("1.0.0", gemma, "--dtype", "float16"),                                    # model config
            job("1.0.0", llama, "--max-model-len", "8192"),                               # engine config
            job("1.0.0", vision, "--dtype", "bfloat16")]                                  # the class does not import
    rep = run(tmp_path, jobs)["1.0.0"]
    assert rep.accepted == 1 and rep.jobs == 6
    got = [(j.model.label, v.stage, v.message) for j, v in rep.rejected]
    assert len(got) == 4
    assert got[0][:2] == ("llama", "parse") and "invalid choice: 'half'" in got[0][2]
    assert got[1] == ("llama", "parse", "ValueError: port 8999 is reserved by the stand-in")
    assert got[2] == ("gemma", "model_config", "ValueError: The model type 'gemma3' does not support float16.")
    assert got[3] == ("llama", "engine_config", "ValueError: max_model_len 8192 is above the derived length")
    assert [(j.model.label, v.verdict) for j, v in rep.unchecked] == [("vis", "unchecked")]
    assert "No module named 'torchvision'" in rep.unchecked[0][1].message
    # every replaced check is listed with why; the stand-in's CPU platform refusal of quantization is one of them
    names = [name for name, why in rep.skips]
    assert "current_platform.verify_quantization" in names and "registry._run_in_subprocess" in names and all(why for _name, why in rep.skips)


def test_the_model_path_is_the_folder_with_the_side_files(tmp_path):
    side = {"sentence_bert_config.json": {"max_seq_length": 512}, "1_Pooling/config.json": {"pooling_mode_mean_tokens": True}}
    with_file = model("embed", needs_side_file=True, files=side)
    without = model("bare", needs_side_file=True)
    rep = run(tmp_path, [job("1.0.0", with_file, "--dtype", "bfloat16"), job("1.0.0", without, "--dtype", "bfloat16")])["1.0.0"]
    assert rep.accepted == 1
    # the folder alone is refused the same way, with no plan arguments: the model's own files, not the plan
    assert rep.rejected == []
    assert [(j.model.label, v.message) for j, v in rep.own_config] == [("bare", "ValueError: sentence_bert_config.json is missing")]
    assert json.loads((tmp_path / "cache" / "models" / "embed" / "sentence_bert_config.json").read_text()) == {"max_seq_length": 512}
    assert json.loads((tmp_path / "cache" / "models" / "embed" / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"]
    with pytest.raises(ValueError, match="inside the model's folder"):
        write_model_dir(model("evil", files={"../outside.json": {}}), tmp_path / "x")


def test_a_rejection_the_bare_folder_gets_too_is_the_models_own_config_not_the_plans(tmp_path):
    """Each model also runs once with no plan arguments (its bare job): a plan's rejection with that same stage and message
    is reported as the model's own config.json refused by the release; any other rejection stays the plan's fault."""
    broken, gemma = model("broken", needs_side_file=True), model("gemma", "gemma3", "Gemma3ForCausalLM")
    reports = run(tmp_path, [job("1.0.0", broken, "--dtype", "bfloat16"), job("1.0.0", gemma, "--dtype", "float16"),
                             job("1.0.0", gemma, "--dtype", "bfloat16")])
    rep = reports["1.0.0"]
    assert rep.jobs == 3 and rep.accepted == 1 and set(rep.bare) == {"broken", "gemma"}
    assert rep.bare["gemma"].verdict == "accepted" and rep.bare["broken"].verdict == "rejected"
    assert [(j.model.label, v.stage) for j, v in rep.own_config] == [("broken", rep.bare["broken"].stage)]
    assert [(j.model.label, v.message) for j, v in rep.rejected] == [
        ("gemma", "ValueError: The model type 'gemma3' does not support float16.")]
    text = "\n".join(table(reports))
    row = next(line for line in text.splitlines() if line.startswith("1.0.0"))
    assert row.split()[-1] == "1"                       # the own-config column: broken's one plan
    assert "own config.json rejected by this release" in text and "broken (org/broken) @ profile-a" in text


def test_each_version_gets_its_own_worker_and_a_wrong_version_is_refused(tmp_path):
    llama = model("llama")
    reports = run(tmp_path, [job("1.0.0", llama, "--dtype", "bfloat16"), job("2.0.0", llama, "--dtype", "half")],
                  versions=("1.0.0", "2.0.0"), early=True)
    assert (reports["1.0.0"].accepted, len(reports["1.0.0"].rejected)) == (1, 0)
    assert (reports["2.0.0"].accepted, len(reports["2.0.0"].rejected)) == (0, 1)
    pythons = {"3.0.0": make_standin(tmp_path / "other", "2.5.0")}
    with pytest.raises(RuntimeError, match="imports vLLM 2.5.0, not 3.0.0"):
        validate(pythons, [job("3.0.0", llama)], {}, tmp_path / "cache")


def test_a_worker_that_dies_is_a_failure_with_its_output(tmp_path):
    python = make_standin(tmp_path / "broken", "1.0.0")
    (tmp_path / "broken" / "vllm" / "engine" / "arg_utils.py").write_text("raise RuntimeError('stand-in import failure')\n")
    with pytest.raises(RuntimeError, match="stand-in import failure"):
        validate({"1.0.0": python}, [job("1.0.0", model("llama"))], {}, tmp_path / "cache")


def fake_plan_host(host, hw, deployments, options):
    """A planner stand-in: refuses on hardware 'small', two instances differing only in --port elsewhere."""
    dep = deployments[0]
    meta = options["model_metadata"][dep["model"]]
    assert os.path.isfile(os.path.join(meta["dir"], "config.json")), "the model's folder is handed over as fetched metadata"
    if hw["name"] == "small":
        return {"errors": [f"{dep['name']}: {dep['model']} does not fit on 2 x 16 GiB GPUs"], "deployments": []}
    inst = [{"name": f"m-{i}", "args": ["/models/m", "--port", str(8000 + i), "--dtype", "bfloat16"]} for i in range(2)]
    return {"errors": [], "deployments": [{"instances": inst}]}


def test_plans_become_distinct_jobs_and_refusals_are_grouped(tmp_path):
    models = [model("a"), model("b")]
    reports: Dict[str, VersionReport] = {}
    jobs = plan_jobs(models, ["1.0.0"], ["small", "big"], tmp_path / "models", fake_plan_host, lambda name: {"name": name,
                     "accelerators": []}, reports)
    rep = reports["1.0.0"]
    assert (rep.plans, rep.instances, len(jobs)) == (2, 4, 2)       # the two instances of a plan differ only in --port
    assert [len(j.plans) for j in jobs] == [2, 2]
    assert list(rep.refused) == ["<model> does not fit on N x N GiB GPUs"] and len(rep.refused["<model> does not fit on N x N GiB GPUs"]) == 2
    assert job_key(["/m", "--port", "8001", "--dtype", "x"]) == job_key(["/other", "--port", "8002", "--dtype", "x"])
    assert job_key(["/m", "--dtype", "x"]) != job_key(["/m", "--dtype", "y"])
    assert reason_of("m: vLLM 0.32.0 has no official build for sm70 (V100); set engine.version") == \
        "vLLM N has no official build for smN (VN)"


def test_the_report_has_the_numbers_and_every_rejection(tmp_path):
    llama, gemma = model("llama"), model("gemma", "gemma3", "Gemma3ForCausalLM")
    reports = run(tmp_path, [job("1.0.0", llama, "--dtype", "bfloat16"), job("1.0.0", gemma, "--dtype", "float16")])
    reports["1.0.0"].plans, reports["1.0.0"].instances = 2, 2
    reports["1.0.0"].refused["<model> does not fit"] = ["x @ small: m: org/x does not fit"]
    text = "\n".join(table(reports, known=[("gemma", "does not support float16")]))
    row = next(line for line in text.splitlines() if line.startswith("1.0.0"))
    assert row.split()[:8] == ["1.0.0", "2", "2", "2", "1", "1", "1", "0"]
    assert "gemma (org/gemma) @ profile-a [KNOWN]" in text and "does not support float16" in text and "--dtype float16" in text
    assert "[KNOWN]" not in "\n".join(table(reports, known=[("gemma", "another message"), ("llama", "does not support float16")]))
    assert "1  <model> does not fit" in text and "e.g. x @ small" in text
    assert "current_platform.check_and_update_config" in text


def test_both_corpus_formats_load_and_the_corpus_wins(tmp_path):
    corpus, excerpts = tmp_path / "corpus", tmp_path / "models"
    corpus.mkdir()
    excerpts.mkdir()
    (corpus / "a.json").write_text(json.dumps({"model": "org/A", "source": "https://github.com/x", "categories": ["dense"],
                                               "config": {"model_type": "llama"}, "files": {"tokenizer_config.json": {}}}))
    (excerpts / "a-excerpt.json").write_text(json.dumps({"source": "https://huggingface.co/org/A/blob/main/config.json",
                                                         "config": {"model_type": "llama"}}))
    (excerpts / "b.json").write_text(json.dumps({"source": "https://huggingface.co/org/B/blob/main/config.json", "config": {}}))
    got = load_models((corpus, excerpts))
    assert [(m.label, m.model_id, m.corpus, list(m.files)) for m in got] == [
        ("a", "org/A", True, ["tokenizer_config.json"]), ("b", "org/B", False, [])]
    (excerpts / "bad.json").write_text(json.dumps({"source": "x"}))
    with pytest.raises(ValueError, match="not a corpus file"):
        load_models((excerpts,))
    assert WORKER.is_file()
